"""`berthctl envs`: list, show, create, the actions, rollback and destroy."""

import sys

import click

from berthctl.commands import ID
from berthctl.errors import CliError
from berthctl.output import echo, emit, printable
from berthctl.pages import all_pages
from berthctl.tasks import echo_for, follow

COLUMNS = [("ID", "id"), ("NAME", "name"), ("STATUS", "status"), ("BRANCH", "branch"),
           ("URL", "url"), ("PROJECT", "project_id")]
TASK_COLUMNS = [("TASK", "task_id"), ("STATUS", "status"), ("ENVIRONMENT", "environment_id")]
DONE_COLUMNS = [("TASK", "task_id"), ("KIND", "kind"), ("STATUS", "status"),
                ("ENVIRONMENT", "environment_id")]
CODE_KINDS = ("deploy", "redeploy")  # the tasks that put code on the server
ACTIONS = ("deploy", "redeploy", "restart", "start", "stop")
wait_option = click.option("--wait", is_flag=True, help="Follow the task: print its log as it "
                           "comes, exit non-zero when it fails.")


@click.group()
def envs():
    """Environments and their deployments."""


@envs.command("list")
@click.option("--project", "project_id", metavar="ID", type=ID, help="Only this project's.")
@click.option("--status", help="Only environments in this status.")
@click.pass_obj
def list_(state, project_id, status):
    """Active environments, of one project or of all the key can see."""
    client = state.client
    ids = [project_id] if project_id else [p["id"] for p in all_pages(client, "/projects")]
    rows = []
    for pid in ids:
        rows.extend(client.get(f"/projects/{pid}/environments", status=status))
    emit(state, rows, COLUMNS)


@envs.command()
@click.argument("env_id", type=ID)
@click.pass_obj
def show(state, env_id):
    """An environment."""
    emit(state, state.client.get(f"/environments/{env_id}"))


@envs.command()
@click.argument("env_id", type=ID)
@click.pass_obj
def status(state, env_id):
    """An environment's status snapshot (its last deployment, proxy, certificates)."""
    emit(state, state.client.get(f"/environments/{env_id}/status"))


@envs.command()
@click.argument("project_id", type=ID)
@click.argument("name")
@click.option("--branch", help="Default: the project's default branch.")
@click.option("--type", "environment_type", default="development", show_default=True,
              type=click.Choice(["development", "staging", "production"]))
@click.option("--cpu-cores", type=float, help="CPU limit of the ERP container.")
@click.option("--ram-mb", type=int, help="Memory limit of the ERP container, MB.")
@click.option("--disk-gb", type=int, help="Disk allocated (recorded, not enforced).")
@wait_option
@click.pass_obj
def create(state, project_id, name, branch, environment_type, cpu_cores, ram_mb, disk_gb,
           wait):
    """Create an environment in PROJECT_ID; its first deployment starts at once."""
    body = {"name": name, "branch": branch, "environment_type": environment_type,
            "cpu_cores": cpu_cores, "ram_mb": ram_mb, "disk_gb": disk_gb}
    client = state.client
    env = client.post(f"/projects/{project_id}/environments",
                      {k: v for k, v in body.items() if v is not None})
    if wait:
        # The create answers with the environment; its deployment is the status's last one.
        last = client.get(f"/environments/{env['id']}/status").get("last_deploy")
        if last is None:
            raise CliError(f"Environment {env['id']} was created but shows no deployment "
                           "to follow.")
        echo(f"Environment {env['id']} created; deployment {last['id']}:", err=True)
        follow(client, env["id"], last["id"], echo_for(state))
        env = client.get(f"/environments/{env['id']}")
    emit(state, env)


def _action(name):
    @click.argument("env_id", type=ID)
    @wait_option
    @click.pass_obj
    def command(state, env_id, wait):
        accepted = state.client.post(f"/environments/{env_id}/actions/{name}")
        _finish(state, env_id, accepted, wait)

    command.__doc__ = f"{name.capitalize()} an environment (a task)."
    return envs.command(name)(command)


for _name in ACTIONS:
    _action(_name)


@envs.command()
@click.argument("env_id", type=ID)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@wait_option
@click.pass_obj
def destroy(state, env_id, yes, wait):
    """Delete an environment: its containers, database and filestore. Irreversible."""
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("destroy is irreversible: pass --yes to confirm "
                                   "without a terminal.")
        env = state.client.get(f"/environments/{env_id}")
        if not click.confirm(f"Delete environment {printable(env['name'])} ({env_id}) with its "
                             "database and filestore?", err=True):
            raise CliError("Not deleted.")
    accepted = state.client.request("DELETE", f"/environments/{env_id}",
                                    headers={"X-Confirm-Delete": "true"})
    _finish(state, env_id, accepted, wait)


@envs.command()
@click.argument("env_id", type=ID)
@click.option("--to", "target", metavar="DEPLOYMENT_ID", type=ID, help="The deployment to return to "
              "(default: the successful one before the current).")
@wait_option
@click.pass_obj
def rollback(state, env_id, target, wait):
    """Return an environment to an earlier deployment's code, image and configuration
    (operations API: needs a user token). Data and schema stay as they are."""
    client = state.client
    if target is None:
        target = _previous_success(client, client.get(f"/environments/{env_id}"))
    deployment = client.ops("POST", f"/deployments/{target}/rollback")
    _finish(state, env_id, {"task_id": deployment["id"], "status": deployment["status"],
                            "environment_id": env_id}, wait, raw=deployment)


def _previous_success(client, env):
    """The newest successful deployment that can be returned to, other than the
    one the environment runs now (its newest deployment of code: restarts, backups
    and the like put no code on the server)."""
    newest, candidates, cursor = None, [], None
    for _ in range(10):  # at most 1000 of the project's deployments are looked at
        page = client.ops("GET", "/deployments", params={"project_id": env["project_id"],
                                                         "limit": 100, "cursor": cursor})
        for d in page["data"]:
            if d["environment_id"] != env["id"] or d["kind"] not in CODE_KINDS:
                continue
            newest = newest or d
            if d["can_rollback"]:
                candidates.append(d)
        cursor = page["pagination"].get("next_cursor")
        if len(candidates) >= 2 or not cursor:
            break
    if candidates and candidates[0] is newest:  # what runs now is no rollback target
        candidates.pop(0)
    if not candidates:
        raise CliError(f"No earlier successful deployment of {env['id']} to roll back to.")
    return candidates[0]["id"]


def _finish(state, env_id, accepted, wait, raw=None):
    if not wait:
        emit(state, raw or accepted, None if raw else TASK_COLUMNS)
        return
    echo(f"Task {accepted['task_id']}:", err=True)
    task = follow(state.client, env_id, accepted["task_id"], echo_for(state))
    emit(state, task, DONE_COLUMNS)


COMMANDS = [envs]
