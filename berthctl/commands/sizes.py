"""`berthctl size ENV_ID`: what an environment's size is made of and how fast it grows."""

import click

from berthctl.commands import ID
from berthctl.output import echo, emit, human_bytes, table


@click.command()
@click.argument("env_id", type=ID)
@click.pass_obj
def size(state, env_id):
    """Database, filestore and add-ons, the largest tables, attachments missing their
    file, orphaned files, the newest backups and the growth over the last day."""
    body = state.client.get(f"/environments/{env_id}/size")
    if state.output == "json":
        emit(state, body)
        return
    growth = body["growth"] or {}

    def grows(figure):
        per_day = growth.get(f"{figure}_per_day")
        if per_day is None:
            return ""
        return f"  ({'+' if per_day >= 0 else '-'}{human_bytes(abs(per_day))} a day)"

    echo(f"measured {body['measured_at'] or 'not yet'}")
    files = body["filestore_files"]
    echo(f"database   {human_bytes(body['database_bytes'])}{grows('database_bytes')}")
    echo(f"filestore  {human_bytes(body['filestore_bytes'])}"
         f"{'' if files is None else f' in {files} files'}{grows('filestore_bytes')}")
    echo(f"add-ons    {human_bytes(body['addons_bytes'])}")
    if body["attachments_missing"] is not None:
        sample = ", ".join(body["missing_sample"] or [])
        echo(f"attachments missing their file: {body['attachments_missing']}"
             f"{f' ({sample})' if sample else ''}")
        echo(f"files no attachment names: {body['files_orphaned']}")
    if body["largest_tables"]:
        echo("")
        table(body["largest_tables"], [("TABLE", "name"),
                                       ("SIZE", lambda t: human_bytes(t["bytes"])),
                                       ("ROWS", lambda t: None if t["rows"] < 0 else t["rows"])])
    if body["backups"]:
        echo("")
        table(body["backups"], [("BACKUP", "id"), ("CREATED", "created_at"),
                                ("SIZE", lambda b: human_bytes(b["total_size"])),
                                ("STORED", lambda b: human_bytes(b["compressed_size"]))])


COMMANDS = [size]
