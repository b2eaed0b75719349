"""Add-ons as Odoo finds and updates them: the manifests in addons_path, the series'
version prefix, and an updated module's migration scripts."""

import ast
import importlib.util
import logging
import os

from odoo_stand_in.config import VERSION

log = logging.getLogger("odoo.service.server")

def find_addons(addons_path):
    """Add-ons as Odoo finds them: the first directory of a name in addons_path that
    holds a __manifest__.py (read with ast.literal_eval, as Odoo does)."""
    found = {}
    for root in addons_path:
        try:
            names = sorted(os.listdir(root))
        except OSError as exc:
            log.warning("addons path %s: %s", root, exc.strerror)
            continue
        for name in names:
            manifest = os.path.join(root, name, "__manifest__.py")
            if name in found or not os.path.isfile(manifest):
                continue
            entry = {"name": name, "path": os.path.join(root, name)}
            try:
                with open(manifest, encoding="utf-8") as f:
                    data = ast.literal_eval(f.read())
                entry.update(title=data.get("name"), version=data.get("version"),
                             depends=list(data.get("depends") or ()),
                             installable=data.get("installable", True))
            except (OSError, ValueError, SyntaxError, AttributeError) as exc:
                entry["error"] = f"unreadable manifest: {exc}"
            found[name] = entry
    return list(found.values())


def in_order(addons):
    """The add-ons (name -> entry) in Odoo's loading order: each after those it depends
    on (dependencies outside addons_path, `base` among them, are taken as loaded), else
    by name. A cycle is broken by name order."""
    done, order = set(), []

    def visit(name, path):
        if name in done or name not in addons or name in path:
            return
        for dep in sorted(addons[name].get("depends") or ()):
            visit(dep, path | {name})
        done.add(name)
        order.append(name)

    for name in sorted(addons):
        visit(name, frozenset())
    return order


def with_dependencies(names, addons):
    """The names and, transitively, the add-ons they depend on (as -i installs them)."""
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in addons and name not in wanted:
            wanted.add(name)
            todo.extend(addons[name].get("depends") or ())
    return wanted


def adapt_version(version):
    """Odoo's adapt_version: a manifest version without the series is prefixed with it
    ('1.2' -> '17.0.1.2'), which is what ir_module_module.latest_version holds."""
    if not version:
        return version
    serie = ".".join(VERSION.split(".")[:2])
    return version if version == serie or version.startswith(serie + ".") else f"{serie}.{version}"


def _key(version):
    return tuple(int(p) if p.isdigit() else 0 for p in (version or "0").split("."))


def migrate(cr, addon, installed, version):
    """Odoo's migration scripts of an updated module: for each folder
    <module>/migrations/<version> above the installed version and up to the new
    one (in version order), its pre-*.py, then its post-*.py, then end-*.py, each
    file's `migrate(cr, installed_version)`, in the caller's transaction: one that
    raises fails the whole update and nothing of it stays."""
    base = os.path.join(addon["path"], "migrations")
    try:
        folders = [f for f in os.listdir(base) if os.path.isdir(os.path.join(base, f))]
    except OSError:
        folders = []
    steps = sorted((f for f in folders
                    if _key(installed) < _key(adapt_version(f)) <= _key(version)),
                   key=lambda f: _key(adapt_version(f)))
    mlog = logging.getLogger("odoo.modules.migration")
    for stage in ("pre", "post", "end"):
        for folder in steps:
            for name in sorted(os.listdir(os.path.join(base, folder))):
                if not (name.startswith(stage + "-") and name.endswith(".py")):
                    continue
                path = os.path.join(base, folder, name)
                mlog.info("module %s: Running migration [%s>] %s", addon["name"], folder,
                          name[:-3])
                spec = importlib.util.spec_from_file_location(f"migration_{name[:-3]}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                module.migrate(cr, installed)
    if steps or installed != version:
        log.info("module %s: updated from %s to %s", addon["name"], installed, version)
