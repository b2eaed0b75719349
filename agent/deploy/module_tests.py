"""A build's test run (the `test` command): in an environment just deployed at the
pushed commit, the add-on modules the push changed and those that depend on them
are installed or updated with their tests, as Odoo runs tests:

    odoo -c CONF -d odoo -u <installed> -i <others> --test-enable
         --test-tags /m1,/m2 --stop-after-init

in a one-off container of the environment's image, the ERP stopped meanwhile and
started again after (the environment stays for inspection). The changed modules
are the top-level directories of the project's checkout whose files changed since
the base commit (the push's previous head; for a new branch, where it forked from
the default branch; with neither, every module of the repository). The control
plane reads the outcome of each test from the log (Odoo's log format)."""

import re

from agent.commands import handles
from agent.deploy import git as git_cmd
from agent.deploy import one_off, updates
from agent.errors import AgentError, engine_errors
from protocol.errors import AgentErrorCode
from protocol.kinds import CommandKind

TIMEOUT = 3600  # seconds: a module's tests on a copy of production
LOG_LIMIT = 1_000_000  # characters of the log the result carries (its head and tail)
_COMMIT = re.compile(r"[0-9a-f]{7,64}")


class TestRunFailed(AgentError):
    """The tests could not run (not: a test failed, which is a result)."""

    code = AgentErrorCode.DEPLOY_FAILED


def _environments(agent):
    from agent.deploy.environments import Environments

    return Environments(agent.docker())


def changed_modules(addons, modules, base=None, default_branch=None):
    """(modules changed since `base`, what they were compared with). `modules`: the
    repository's module names."""
    since = None
    if base and _COMMIT.fullmatch(base) and set(base) != {"0"}:
        try:
            git_cmd.run(["-C", str(addons), "cat-file", "-e", f"{base}^{{commit}}"],
                        "finding the base commit")
            since = base
        except AgentError:
            since = None
    if since is None and default_branch:
        try:
            git_cmd.check_ref("the default branch", default_branch)
            since = git_cmd.run(["-C", str(addons), "merge-base", "HEAD",
                                 f"origin/{default_branch}"], "finding the fork point").strip()
        except AgentError:
            since = None
    if since is None:
        return sorted(modules), "every module (no base commit to compare with)"
    names = git_cmd.run(["-C", str(addons), "diff", "--name-only", since, "HEAD"],
                        "listing the changed files").splitlines()
    top = {name.split("/", 1)[0] for name in names if "/" in name}
    return sorted(top & set(modules)), f"changes since {since[:12]}"


def with_dependents(chosen, manifests):
    """`chosen` and every module that depends on one of them, directly or not."""
    out, grew = set(chosen), True
    while grew:
        grew = False
        for name, manifest in manifests.items():
            depends = manifest.get("depends") or []
            if name not in out and isinstance(depends, list) and out & set(depends):
                out.add(name)
                grew = True
    return sorted(out)


@handles(CommandKind.TEST)
def run_tests(agent, payload, log):
    environments = _environments(agent)
    env_id = payload["environment_id"]
    n = environments._names(env_id)
    addons = n["dir"] / "addons"
    dirs = [addons, *sorted((addons / ".addon-repositories").glob("*"))]
    found = updates.manifests(dirs)
    own = list(updates.manifests([addons]))
    if payload.get("modules"):
        chosen, why = sorted(set(payload["modules"]) & set(found)), "the modules named"
    else:
        chosen, why = changed_modules(addons, own, payload.get("base_commit"),
                                      payload.get("default_branch"))
    modules = with_dependents(chosen, found)
    log("info", f"modules to test ({why}): {', '.join(chosen) or 'none'}"
                + (f"; with those depending on them: {', '.join(modules)}"
                   if modules != chosen else ""))
    if not modules:
        return {"exit_code": 0, "modules": [], "log": "", "compared": why}
    with engine_errors():
        db = environments.docker.containers.get(n["db"])
        erp = environments._container(n["erp"])
    rows = updates.installed(db) or {}
    update = [m for m in modules if rows.get(m, ("",))[0] == "installed"]
    install = [m for m in modules if m not in update]
    args = ["odoo", "-c", updates.CONFIG, "-d", updates.DB]
    args += ["-u", ",".join(update)] if update else []
    args += ["-i", ",".join(install)] if install else []
    args += ["--test-enable", "--test-tags", ",".join(f"/{m}" for m in modules),
             "--stop-after-init"]
    log("info", f"running the tests: {' '.join(args[1:])}")
    if erp is not None and erp.status == "running":
        with engine_errors():
            erp.stop(timeout=20)
    try:
        from agent.deploy.environments import erp_volumes, variables

        image = erp.image.id if erp is not None else payload["erp_image"]
        code, output = one_off.run(environments, env_id, "tests", image, args,
                                   volumes=erp_volumes(n), environment=variables(
                                       payload.get("variables")),
                                   timeout=TIMEOUT, log=log, tail=20)
    except AgentError as exc:
        raise TestRunFailed(f"the tests did not run to their end: {exc}") from exc
    finally:
        if erp is not None:
            environments.start_erp(env_id, log)
    log("info" if code == 0 else "warning", f"the tests exited {code}")
    return {"exit_code": code, "modules": modules, "compared": why, "log": _capped(output)}


def _capped(lines):
    text = "\n".join(lines)
    if len(text) <= LOG_LIMIT:
        return text
    half = LOG_LIMIT // 2
    return text[:half] + "\n[… the middle of the log is left out …]\n" + text[-half:]
