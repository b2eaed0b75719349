"""Module updates on deploy, as Odoo.sh does them: the add-on modules whose
manifest `version` rose above what the database has installed
(`ir_module_module.latest_version`) are updated (`-u`), and modules newly
present and marked `auto_install`, or named in the environment's settings
(`install_modules`), are installed (`-i`), in a one-off container
of the new image with the new configuration and add-ons (`--stop-after-init`),
while the previous ERP is stopped. Versions are compared as Odoo keeps them:
'1.2' in a 17.0 database is '17.0.1.2'. Odoo cannot downgrade a module: a
deploy of an older commit updates nothing (the database keeps the newer
version, and the task log says so)."""

import ast
import os

from agent.deploy import one_off
from agent.deploy.git import DeployError
from agent.errors import AgentError, engine_errors
from protocol.errors import AgentErrorCode

TIMEOUT = 3600  # seconds: a large database's migration scripts
LOG_TAIL = 60  # lines of the update's output kept in the task log
CONFIG = "/etc/odoo/odoo.conf"
DB = "odoo"


class UpdateFailed(DeployError):
    """The update failed (or the ERP after it, or a post-deploy check): the deploy
    reverts, unless `kept_as_is` says why not (the environment turned it off, or a
    first deploy has nothing to go back to): then nothing was put back.
    `database_changed`: a module update ran (the revert restores the database too);
    `checks`: the post-deploy checks' report, when they ran."""

    code = AgentErrorCode.MODULE_UPDATE_FAILED

    def __init__(self, message=None, kept_as_is=None, database_changed=True, checks=None):
        super().__init__(message)
        self.kept_as_is = kept_as_is
        self.database_changed = database_changed
        self.checks = checks


def _key(version):
    return tuple(int(p) if p.isdigit() else 0 for p in (version or "0").split("."))


def adapt(version, series):
    if not version or not series:
        return version
    return version if version == series or version.startswith(series + ".") else \
        f"{series}.{version}"


def manifests(dirs):
    """{module: manifest} in these add-on directories (the first of a name wins), as
    Odoo reads them (`ast.literal_eval`); unreadable ones are left out."""
    found = {}
    for root in dirs:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            path = os.path.join(root, name, "__manifest__.py")
            if name in found or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    data = ast.literal_eval(f.read())
            except (OSError, ValueError, SyntaxError):
                continue
            if isinstance(data, dict):
                found[name] = data
    return found


def installed(db):
    """{module: (state, latest_version)} from the database, or None when it has no
    modules table yet (a first deploy: the ERP creates it)."""
    sql = ("SELECT CASE WHEN to_regclass('ir_module_module') IS NULL THEN '?' ELSE "
           "coalesce((SELECT string_agg(name || '|' || state || '|' || "
           "coalesce(latest_version, ''), E'\\n') FROM ir_module_module), '') END")
    with engine_errors():
        code, output = db.exec_run(["psql", "-X", "-q", "-t", "-A", "-U", DB, "-d", DB,
                                    "-v", "ON_ERROR_STOP=1", "-c", sql])
    out = output.decode(errors="replace").strip()
    if code != 0:
        if "does not exist" in out:  # no database at all yet
            return None
        raise DeployError(f"could not read the installed modules: {out[-500:]}")
    if out == "?":
        return None
    rows = (line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2)
    return {name: (state, version) for name, state, version in rows}


def plan(db, dirs, log, named=()):
    """(modules to update, modules to install), both sorted; logged either way.
    `named`: the modules the environment's settings say to install."""
    rows = installed(db)
    if rows is None:
        if named:  # the one-off makes the database, with them (Odoo ignores unknown names)
            log("info", f"the database is not made yet: it is made with the modules named "
                        f"to install ({', '.join(sorted(named))})")
            return [], sorted(set(named))
        log("info", "no module update: the database is not made yet (the ERP makes it)")
        return [], []
    series = ".".join((rows.get("base", ("", ""))[1] or "").split(".")[:2])
    found = manifests(dirs)
    update, older = [], []
    for name, m in found.items():
        state, have = rows.get(name, ("", ""))
        if state != "installed" or not m.get("installable", True):
            continue
        new = adapt(str(m.get("version") or ""), series)
        if _key(new) > _key(have):
            update.append(name)
            log("info", f"module {name}: {have or '?'} -> {new}, to update")
        elif _key(new) < _key(have):
            older.append(name)
            log("warning", f"module {name}: the code's version {new} is older than the "
                           f"database's {have}; Odoo cannot downgrade a module: not updated")
    install = sorted(name for name, m in found.items()
                     if m.get("auto_install") and m.get("installable", True)
                     and rows.get(name, ("",))[0] != "installed")
    for name in install:
        log("info", f"module {name}: new and auto_install, to install")
    for name in sorted(set(named) - set(install)):
        if rows.get(name, ("",))[0] == "installed":
            continue
        # The database lists the modules of the image's own add-ons too (Odoo's `sale`…).
        known = name in rows or name in found
        if known and found.get(name, {}).get("installable", True):
            install.append(name)
            log("info", f"module {name}: named to install in the environment's settings, "
                        "to install")
        else:
            log("warning", f"module {name}: named to install, but no add-on of that name "
                           "is installable here: not installed")
    if not update and not install:
        log("info", "no module changed version: no update")
    return sorted(update), sorted(install)


def run(envs, env_id, image, volumes, environment, update, install, log):
    """The update in a one-off container of `image`; raises UpdateFailed with the
    modules and the last lines of Odoo's output when it exits non-zero."""
    args = ["odoo", "-c", CONFIG, "-d", DB]
    if update:
        args += ["-u", ",".join(update)]
    if install:
        args += ["-i", ",".join(install)]
    args.append("--stop-after-init")
    what = ", ".join([*(f"update {m}" for m in update), *(f"install {m}" for m in install)])
    log("info", f"running the module update ({what}): {' '.join(args[1:])}")
    try:
        code, output = one_off.run(envs, env_id, "update", image, args, volumes=volumes,
                                   environment=environment, timeout=TIMEOUT, log=log,
                                   tail=LOG_TAIL)
    except AgentError as exc:
        raise UpdateFailed(f"the module update ({what}) did not finish: {exc}") from exc
    if code != 0:
        last = next((line for line in reversed(output) if line.strip()), "no output")
        raise UpdateFailed(f"the module update ({what}) failed (exit {code}): {last.strip()}")
    log("info", f"the module update is done ({what})")
