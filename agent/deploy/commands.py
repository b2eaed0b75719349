"""The environment commands: deploy (after a pre-deploy backup when the control
plane asks for one), start, stop, restart, destroy, and routes (an
environment's host names changed). When the command carries the server's proxy
settings, the proxy follows: a deploy routes the environment's host names to
its new ERP container, a destroy unroutes them, and the others load the
routes again (an ERP's address changes when it starts)."""

from pathlib import Path

from agent import commands
from agent.commands import handles
from agent.deploy import checks
from agent.deploy.requirements import RequirementsFailed
from agent.deploy.updates import UpdateFailed
from agent.errors import AgentError
from agent.mail import erp_settings
from agent.mail.store import MailStore
from protocol.errors import AgentErrorCode
from protocol.kinds import CommandKind, Phase


def _environments(agent):
    from agent.deploy.environments import Environments  # subprocess, git, HTTP: when needed

    return Environments(agent.docker())


class PreBackupFailed(AgentError):
    """The pre-deploy backup failed: nothing was deployed (`untouched`)."""

    code = AgentErrorCode.PRE_BACKUP_FAILED
    partial_result = {"untouched": True}


class DeployFailed(AgentError):
    """A deploy that failed after its pre-deploy backup: its `partial_result`
    still carries the backup, which stands."""

    code = AgentErrorCode.DEPLOY_FAILED

    def __init__(self, message, result):
        super().__init__(message)
        self.partial_result = result


def _maintenance(agent, payload, log):
    """While a deploy's module update runs (the ERP stopped): the environment's
    names answer 503 with Retry-After, as for a stopped environment."""
    def announce():
        _rerouted(agent, payload, log)
        if payload.get("proxy"):
            log("info", "the proxy answers 503 (Retry-After) while the update runs")
    return announce


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


def _stands(agent, payload, environments, log):
    """The deploy, routed, then checked (agent/deploy/checks.py); what was deployed
    before stays aside until the checks pass, and comes back (its route too) when
    one fails, unless the environment's `post_deploy_checks` is `warn`."""
    env_id = payload["environment_id"]
    proxy = agent.proxy() if payload.get("proxy") else None
    route = (proxy.routes().get(env_id) if proxy is not None else None)
    result = environments.deploy(payload, log, stopped=_maintenance(agent, payload, log),
                                 keep_previous=True)
    try:
        _routed(agent, payload, log, result)
        report = checks.run(environments.docker, environments.root / env_id, proxy, payload,
                            result, log)
    except Exception:
        environments.settle(env_id)
        raise
    failed = [c for c in report if c["status"] == "failed"]
    if not failed or payload.get("post_deploy_checks") == "warn":
        if failed:
            log("warning", "the environment's post-deploy checks only warn: the deploy stands")
        environments.settle(env_id)
        return {**result, "checks": report}
    why = "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
    failure = environments.unwind(env_id, payload, f"the post-deploy checks failed ({why})",
                                  log, database_changed=bool(result.get("updated_modules")),
                                  checks=report)
    if route is not None and not failure.kept_as_is:  # the previous ERP's route, as it was
        proxy.route(env_id, route["hostnames"], route["erp"], longpolling=route["longpolling"])
    raise failure


@handles(CommandKind.DEPLOY)
def deploy(agent, payload, log):
    """With `pre_backup` (an environment whose database has data), the backup
    command runs first; if it fails, nothing of the environment is touched. If
    the deploy's module update fails (agent/deploy/updates.py), or its new ERP
    or a post-deploy check (agent/deploy/checks.py), the deploy reverts to the
    previous code (and the pre-deploy backup, when a module update ran), and fails."""
    # First: an engine that cannot be reached fails the deploy itself, not its backup.
    environments = _environments(agent)
    if payload.get("mail_catcher"):  # not production: its mail goes to the catcher
        payload = {**payload, "mail": erp_settings(agent, payload["environment_id"])}
    pre = payload.get("pre_backup")
    if not pre:
        try:
            return _stands(agent, payload, environments, log)
        except RequirementsFailed as exc:  # before anything was stopped
            raise DeployFailed(str(exc), {"untouched": True}) from exc
        except UpdateFailed as exc:  # a database the control plane saw no data in yet
            if exc.kept_as_is:
                raise DeployFailed(f"{exc}; {exc.kept_as_is}", _said(exc, {})) from exc
            log("error", f"{exc}; reverting to the previous code" + (
                " (no pre-deploy backup: the database stays as the update left it)"
                if exc.database_changed else ""))
            _restarted(agent, payload, environments, log)
            raise DeployFailed(f"{exc}; reverted to the previous code",
                               _said(exc, {"untouched": True})) from exc
    try:
        backup = commands.run(agent, CommandKind.BACKUP, pre, log, label="pre-deploy backup")
    except Exception as exc:
        raise PreBackupFailed(f"the pre-deploy backup failed ({exc}); nothing was "
                              "deployed and the environment is as it was") from exc
    log("info", f"pre-deploy backup {pre['backup_id']} taken and verified")
    commands.enter_phase(log, Phase.DEPLOY)  # the deploy's own time limit starts now
    try:
        result = _stands(agent, payload, environments, log)
    except RequirementsFailed as exc:  # before anything was stopped
        raise DeployFailed(str(exc), {"pre_backup": backup, "untouched": True}) from exc
    except UpdateFailed as exc:
        if exc.kept_as_is:
            raise DeployFailed(f"{exc}; {exc.kept_as_is}: the environment is left as "
                               f"the deploy left it; the pre-deploy backup {pre['backup_id']} "
                               "holds the database from before",
                               _said(exc, {"pre_backup": backup})) from exc
        if not exc.database_changed:  # no module update ran: the database stays
            log("error", f"{exc}; reverting to the previous code and ERP")
            _restarted(agent, payload, environments, log)
            raise DeployFailed(f"{exc}; reverted: the previous code is back (no module "
                               "was updated: the database was not restored)",
                               _said(exc, {"pre_backup": backup, "untouched": True})) from exc
        _revert(agent, payload, environments, pre, backup, exc, log)
        raise DeployFailed(f"{exc}; reverted: the previous code is back and the database is "
                           f"the pre-deploy backup {pre['backup_id']}",
                           _said(exc, {"pre_backup": backup, "untouched": True})) from exc
    except Exception as exc:
        raise DeployFailed(str(exc), {"pre_backup": backup}) from exc
    return {**result, "pre_backup": backup}


def _said(failure, result):
    """The partial result, with the post-deploy checks' report when they ran."""
    return {**result, "checks": failure.checks} if failure.checks is not None else result


def _restarted(agent, payload, environments, log):
    """The previous ERP (put back, stopped) started and routed again."""
    environments.start_erp(payload["environment_id"], log)
    _rerouted(agent, payload, log)


def _revert(agent, payload, environments, pre, backup, failure, log):
    """After a failed module update (the previous code and ERP container already
    back, the ERP stopped): the database from the pre-deploy backup, as Odoo.sh
    does (Odoo commits module by module, so a failed update can leave some done),
    then the previous ERP started and routed. Writes made after the backup are lost."""
    log("error", f"{failure}; reverting to the previous code and the pre-deploy backup "
                 f"{pre['backup_id']}")
    try:
        commands.run(agent, CommandKind.RESTORE, pre, log, revert_to=backup)
        _restarted(agent, payload, environments, log)
    except Exception as exc:
        raise DeployFailed(f"{failure}; the revert failed too ({exc}): the environment needs "
                           f"the pre-deploy backup {pre['backup_id']} restored",
                           {"pre_backup": backup}) from exc


def _runtime(kind):
    """start, stop and restart: the containers (Environments' method of the same
    name), then the routes follow."""
    @handles(kind)
    def handler(agent, payload, log):
        result = getattr(_environments(agent), kind)(payload["environment_id"], log)
        _rerouted(agent, payload, log)
        return result


for _kind in (CommandKind.START, CommandKind.STOP, CommandKind.RESTART):
    _runtime(_kind)


@handles(CommandKind.DESTROY)
def destroy(agent, payload, log):
    result = _environments(agent).destroy(payload["environment_id"],
                                          payload.get("delete_data", False), log)
    if payload.get("delete_data"):  # its caught mails too, caught or not by a catcher now
        MailStore(Path(agent.data_dir) / "mails").forget(payload["environment_id"])
    if payload.get("proxy"):
        agent.proxy().unroute(payload["environment_id"])
    return result


@handles(CommandKind.ROUTES)
def routes(agent, payload, log):
    """An environment's host names changed (a custom domain verified or removed)."""
    if payload.get("proxy"):
        proxy = agent.proxy()
        proxy.configure(payload["proxy"])
        proxy.rename(payload["environment_id"], payload.get("hostnames") or [])
    return {"hostnames": payload.get("hostnames") or []}
