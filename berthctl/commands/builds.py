"""`berthctl builds PROJECT_ID` and `berthctl build BUILD_ID [--wait]`: a push's
builds and one build's tests, failures first. With `--wait` the command follows the
build to its end; its exit code is its result (0 passed, 6 otherwise)."""

import time

import click

from berthctl.commands import ID
from berthctl.errors import TaskFailed
from berthctl.output import echo, emit, table

ACTIVE = ("queued", "running")
INTERVAL = 2.0


def _commit(b):
    return (b["commit"] or "")[:10]


@click.command()
@click.argument("project_id", type=ID)
@click.option("--branch", help="Only this branch's builds.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.pass_obj
def builds(state, project_id, branch, limit):
    """The project's builds, newest first."""
    body = state.client.get(f"/projects/{project_id}/builds", limit=limit,
                            **({"branch": branch} if branch else {}))
    if state.output == "json":
        emit(state, body)
        return
    table(body["data"], [("BUILD", "id"), ("BRANCH", "branch"), ("COMMIT", _commit),
                         ("STATUS", "status"),
                         ("TESTS", lambda b: _counts(b["counts"])),
                         ("CREATED", "created_at")])


def _counts(counts):
    if not counts:
        return None
    return f"{counts['passed']}/{counts['tests']} passed" + (
        f", {counts['failed']} failed" if counts["failed"] else "") + (
        f", {counts['error']} errors" if counts["error"] else "")


@click.command()
@click.argument("build_id", type=ID)
@click.option("--wait", is_flag=True, help="Follow the build to its end; exit 0 when it "
                                           "passed, 6 otherwise.")
@click.option("--log", "with_log", is_flag=True, help="Print the ERP's test log too.")
@click.pass_obj
def build(state, build_id, wait, with_log):
    """One build: its status, the modules tested and each test, failures first."""
    body = state.client.get(f"/builds/{build_id}")
    shown = None
    while wait and body["status"] in ACTIVE:
        if body["stage"] != shown and state.output != "json":
            shown = body["stage"]
            echo(f"{body['status']}: {shown or 'waiting for its server'}")
        time.sleep(INTERVAL)
        body = state.client.get(f"/builds/{build_id}")
    if state.output == "json":
        emit(state, body)
    else:
        _show(body, with_log)
    if wait and body["status"] != "passed":
        raise TaskFailed(f"Build {build_id} {body['status']}: {body['reason'] or ''}".strip())


def _show(body, with_log):
    echo(f"build {body['id']}: {body['status']}"
         f"{' (' + body['reason'] + ')' if body['reason'] else ''}")
    echo(f"branch {body['branch']} at {_commit(body)}; modules: "
         f"{', '.join(body['modules'] or []) or '-'}")
    if body["tests"]:
        echo("")
        table(body["tests"], [("STATUS", "status"), ("MODULE", "module"), ("TEST", "name"),
                              ("SECONDS", "seconds")])
        for t in body["tests"]:
            if t["status"] in ("failed", "error") and t["failure"]:
                echo(f"\n{t['status'].upper()}: {t['module']} {t['name']}\n{t['failure']}")
    if with_log and body["log"]:
        echo("\n" + body["log"])


COMMANDS = [builds, build]
