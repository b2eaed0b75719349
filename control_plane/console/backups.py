"""An environment's backups in the console: take one (with its comment), drill the
newest, restore one or a moment after the name is typed again, download a part.
Each a form on the environment's page (console/environments.py)."""

import datetime as dt
import uuid

from flask import redirect, request, url_for

from control_plane.api.ops.backups import CreateBackupBody
from control_plane.console import FormInvalid, actor, audited_read, berth, blp, form
from control_plane.console.environments import confirmed
from control_plane.console.form_errors import beside
from control_plane.services.backups import backups, drills
from control_plane.services.deploys import environments as envs
from control_plane.vocabulary.errors import OutsideWindow, Unprocessable


def _back(env_id, task_id):
    return redirect(url_for("console.environment", env_id=env_id, task=task_id), 303)


@blp.post("/environments/<uuid:env_id>/backups")
def create_backup(env_id):
    comment = form(CreateBackupBody(), ("comment",))["comment"]
    return _back(env_id, backups.take(actor(), env_id, berth=berth(), comment=comment).task_id)


@blp.post("/environments/<uuid:env_id>/drills")
def drill(env_id):
    return _back(env_id, drills.drill_now(actor(), env_id, berth=berth())["id"])


@blp.post("/environments/<uuid:env_id>/restore")
def restore(env_id):
    """A backup (`backup_id`) or a moment (`target_time`, UTC as the page shows every
    time); a moment outside the window is said beside its field."""
    confirmed(envs.get_environment(actor(), env_id))
    moment = request.form.get("target_time")
    if not moment:
        try:
            backup_id = uuid.UUID(request.form.get("backup_id", ""))
        except ValueError:
            raise FormInvalid("Choose a backup to restore.",
                              fields={"backup_id": "Choose a backup to restore."}) from None
        return _back(env_id, backups.restore_into(actor(), env_id, backup_id,
                                                  berth=berth()).id)
    with beside("target_time", Unprocessable):
        try:
            target_time = dt.datetime.fromisoformat(moment)
        except ValueError:
            raise Unprocessable("Give the moment as a date and a time (UTC).") from None
        try:
            task = backups.restore_into(actor(), env_id, None, berth=berth(),
                                        target_time=target_time)
        except OutsideWindow as err:
            raise Unprocessable(_window(err.extra["window_start"], err.extra["window_end"])
                                ) from None
    return _back(env_id, task.id)


def _window(start, end):
    """The window as the form says it (the API's message names its field)."""
    if start is None:
        return ("Nothing is restorable to a moment yet: no backup holds a base with its "
                "WAL archived after it.")
    shown = [dt.datetime.fromisoformat(t).strftime("%Y-%m-%d %H:%M:%S") for t in (start, end)]
    return f"Choose a moment from {shown[0]} to {shown[1]} UTC."


@blp.get("/backups/<uuid:backup_id>/download/<any(database,filestore,manifest):part>")
def download_backup(backup_id, part):
    audited_read()
    urls = backups.download(actor(), backup_id, berth())
    return redirect(urls[f"{part}_url"], 303)
