"""Add-ons' Python requirements, as Odoo.sh installs them: the `requirements.txt`
at the root of the project's repository and of each add-on repository. They are
installed into an image of the environment's own, built `FROM` the ERP image
(pip of that image, so the index it is configured for: `PIP_INDEX_URL`,
`PIP_FIND_LINKS` or its pip.conf), tagged by a hash of the ERP image's id and
the files' contents, so an unchanged set is not built again and a container
re-created from it keeps them. The build runs before anything of the running
environment stops; pip's output goes to the task log."""

import contextlib
import hashlib
import re
import shutil
import tempfile
from pathlib import Path

from agent.deploy.git import DeployError
from agent.errors import AgentError, ImageNotFound, engine_errors
from protocol.errors import AgentErrorCode

FILE = "requirements.txt"
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # the engine colours a build's standard error
LOG_TAIL = 60  # lines of the build's output kept in the task log


class RequirementsFailed(DeployError):
    """A requirement could not be installed: nothing was stopped."""

    code = AgentErrorCode.REQUIREMENTS_FAILED


def found(dirs):
    return [Path(d) / FILE for d in dirs if (Path(d) / FILE).is_file()]


def image(envs, env_id, n, base, dirs, log):
    """The image the ERP runs: `base` when no repository has requirements, else
    the environment's image with them (built here when not built yet)."""
    files = found(dirs)
    if not files:
        return base
    with engine_errors():
        base_image = envs.docker.images.get(base)
    digest = hashlib.sha256(base_image.id.encode())
    for path in files:
        digest.update(b"\0" + path.read_bytes())
    repository = f"berth-erp-{n['erp'].removeprefix('berth-').removesuffix('-erp')}"
    tag = f"{repository}:{digest.hexdigest()[:16]}"
    names = ", ".join(str(p.relative_to(n["dir"] / "addons")) for p in files)
    try:
        with engine_errors():
            envs.docker.images.get(tag)
        log("info", f"the add-ons' requirements ({names}) are unchanged: image {tag}")
        return tag
    except ImageNotFound:
        pass
    log("info", f"installing the add-ons' requirements ({names}) into image {tag}")
    _build(envs, env_id, base, base_image, files, tag, log)
    for old in _older(envs, repository, tag):  # in use by a running ERP: kept
        with contextlib.suppress(AgentError), engine_errors():
            envs.docker.images.remove(old)
    return tag


def _build(envs, env_id, base, base_image, files, tag, log):
    user = (base_image.attrs.get("Config") or {}).get("User") or "root"
    context = Path(tempfile.mkdtemp(prefix="berth-requirements-"))
    try:
        (context / "requirements").mkdir()
        for i, path in enumerate(files):
            shutil.copyfile(path, context / "requirements" / f"{i:02d}.txt")
        (context / "Dockerfile").write_text(
            f"FROM {base}\nUSER root\nCOPY requirements/ /tmp/berth-requirements/\n"
            # Debian's pip refuses system installs (PEP 668) unless told; older ones
            # ignore the variable.
            "RUN set -e; for f in /tmp/berth-requirements/*.txt; do "
            "PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore "
            "PIP_DISABLE_PIP_VERSION_CHECK=1 pip install --no-cache-dir -r \"$f\"; done; "
            "rm -rf /tmp/berth-requirements\n"
            f"USER {user}\nLABEL berth.environment_id={env_id}\n")
        lines, error = [], None
        with engine_errors():
            for chunk in envs.docker.api.build(path=str(context), tag=tag, rm=True,
                                               forcerm=True, decode=True, pull=False):
                if "stream" in chunk:
                    text = _COLOURS.sub("", chunk["stream"])
                    lines += [ln for ln in text.splitlines() if ln.strip()]
                if "error" in chunk:
                    error = chunk["error"].strip()
    finally:
        shutil.rmtree(context, ignore_errors=True)
    for line in lines[-LOG_TAIL:]:
        log("info" if error is None else "error", f"requirements: {line}")
    if error is not None:
        said = next((ln for ln in reversed(lines) if "ERROR" in ln), error)
        raise RequirementsFailed(f"the add-ons' Python requirements could not be installed "
                                 f"(nothing was stopped): {said.strip()}")
    log("info", f"built image {tag} with the add-ons' requirements")


def _older(envs, repository, keep):
    with engine_errors():
        images = envs.docker.images.list(name=repository)
    return [t for image in images for t in image.tags if t != keep]
