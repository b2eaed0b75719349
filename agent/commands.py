"""The durable commands the agent runs, by kind: kind -> handler(agent, payload,
log). The control plane's command queue sends these kinds; a kind not here
fails the command (the agent may be older than the control plane)."""

import contextlib

from agent import __version__
from agent.errors import AgentError

HANDLERS = {}


def handles(kind):
    def register(handler):
        HANDLERS[kind] = handler
        return handler
    return register


def run(agent, kind, payload, log):
    handler = HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown command kind {kind!r}")
    return handler(agent, payload, log)


def _environments(agent):
    from agent.deploy.environments import Environments  # loads the engine client only when needed

    return Environments(agent.docker())


@handles("ping")
def ping(agent, payload, log):
    log("info", f"pong from berth-agent {__version__}")
    return {"pong": True, "agent_version": __version__}


class PreBackupFailed(AgentError):
    """The pre-deploy backup failed: nothing was deployed (`untouched`)."""

    code = "pre_backup_failed"
    partial_result = {"untouched": True}


class DeployFailed(AgentError):
    """A deploy that failed after its pre-deploy backup: its `partial_result`
    still carries the backup, which stands."""

    code = "deploy_failed"

    def __init__(self, message, result):
        super().__init__(message)
        self.partial_result = result


def _routed(agent, payload, log, result):
    """A deployed environment's host names routed to its new ERP container, when
    the control plane runs a proxy on this server (`proxy` in the command)."""
    proxy = agent.proxy() if payload.get("proxy") else None
    if proxy is not None:
        proxy.configure(payload["proxy"])
        workers = int((payload.get("erp_options") or {}).get("workers") or 0)
        proxy.route(payload["environment_id"], payload.get("hostnames") or [],
                    result["erp_container"], longpolling=workers > 0)
        log("info", f"the proxy routes {', '.join(payload.get('hostnames') or [])}")
    return result


def _rerouted(agent, payload, log):
    """After a start, stop or restart: the routes follow the ERP's new address (or
    answer 503 while it is stopped)."""
    proxy = agent.proxy() if payload.get("proxy") else None
    if proxy is not None:
        proxy.configure(payload["proxy"])
        proxy.apply()


@handles("deploy")
def deploy(agent, payload, log):
    """With `pre_backup` (an environment whose database has data), the backup
    comes first; if it fails, nothing of the environment is touched."""
    pre = payload.get("pre_backup")
    if not pre:
        return _routed(agent, payload, log, _environments(agent).deploy(payload, log))
    with _backups(agent, pre, "backup", f"backup {pre['backup_id']}") as backups:
        try:
            backup = backups.backup(pre, log, label="pre-deploy backup")
        except Exception as exc:
            raise PreBackupFailed(f"the pre-deploy backup failed ({exc}); nothing was "
                                  "deployed and the environment is as it was") from exc
    log("info", f"pre-deploy backup {pre['backup_id']} taken and verified")
    try:
        result = _routed(agent, payload, log, _environments(agent).deploy(payload, log))
    except Exception as exc:
        raise DeployFailed(str(exc), {"pre_backup": backup}) from exc
    return {**result, "pre_backup": backup}


@handles("start")
def start(agent, payload, log):
    result = _environments(agent).start(payload["environment_id"], log)
    _rerouted(agent, payload, log)
    return result


@handles("stop")
def stop(agent, payload, log):
    result = _environments(agent).stop(payload["environment_id"], log)
    _rerouted(agent, payload, log)
    return result


@handles("restart")
def restart(agent, payload, log):
    result = _environments(agent).restart(payload["environment_id"], log)
    _rerouted(agent, payload, log)
    return result


@handles("destroy")
def destroy(agent, payload, log):
    result = _environments(agent).destroy(payload["environment_id"],
                                          payload.get("delete_data", False), log)
    if payload.get("proxy"):
        agent.proxy().unroute(payload["environment_id"])
    return result


@handles("routes")
def routes(agent, payload, log):
    """An environment's host names changed (a custom domain verified or removed)."""
    if payload.get("proxy"):
        proxy = agent.proxy()
        proxy.configure(payload["proxy"])
        proxy.rename(payload["environment_id"], payload.get("hostnames") or [])
    return {"hostnames": payload.get("hostnames") or []}



@contextlib.contextmanager
def _backups(agent, payload, kind, key):
    """The environment's Backups, its progress shown by `berth-agent status`
    (the status file) while the command runs."""
    from agent.backups.backups import Backups
    from agent.deploy.environments import Environments
    from agent.status import now_iso

    status = getattr(agent, "status", None)

    def progress(**fields):
        if status is not None:
            status.operation(key, **fields)

    progress(kind=kind, environment_id=payload["environment_id"],
             backup_id=payload.get("backup_id"), started_at=now_iso(), phase="starting",
             bytes_done=0)
    envs = Environments(agent.docker(), health_timeout=int(payload.get("health_timeout") or 120))
    try:
        yield Backups(envs, agent.config.credential, progress)
    finally:
        if status is not None:
            status.end_operation(key)


@handles("backup")
def backup(agent, payload, log):
    with _backups(agent, payload, "backup", f"backup {payload['backup_id']}") as backups:
        return backups.backup(payload, log)


@handles("restore")
def restore(agent, payload, log):
    source = (f"import {payload['import'].get('import_id')}" if payload.get("import")
              else payload["backup_id"])
    key = f"restore {source} into {payload['environment_id']}"
    with _backups(agent, payload, "restore", key) as backups:
        return backups.restore(payload, log)


@handles("export")
def export(agent, payload, log):
    """A completed backup written as Odoo's backup zip (agent/backups/odoo_transfer.py)."""
    from agent.backups import odoo_transfer

    with _backups(agent, payload, "export", f"export {payload['backup_id']}") as backups:
        return odoo_transfer.export(backups, payload, log)
