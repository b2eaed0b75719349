"""Add-on repositories: extra Git repositories of ERP add-ons that a project's
deployments check out next to the project's own code (rule 10: a push to one
redeploys the project's auto-deploy environments)."""

import re
from urllib.parse import urlparse

import peewee

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.inputs import git_rules
from control_plane.models import AddonRepository, Project
from control_plane.services import audit
from control_plane.vocabulary.errors import (
    AddonRepositoryExists,
    InvalidBranch,
    InvalidFullName,
    InvalidRepositoryUrl,
    NotFound,
)

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?P<path>.+)$")  # git@github.com:acme/erp.git


def full_name_of(url):
    """`owner/name` (GitLab: `group/sub/name`) of a repository URL, in lower case;
    what push payloads call repository.full_name. None when the URL has no path."""
    if not url:
        return None
    url = url.strip()
    if "://" in url:
        path = urlparse(url).path
    else:
        m = _SCP_LIKE.match(url)
        path = m.group("path") if m else url
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return path.strip("/").lower() or None


def _check_url(url):
    """https, ssh or scp-like, never credentials nor local paths (git_rules)."""
    url = (url or "").strip()
    problem = git_rules.url_problem(url)
    if problem is not None:
        raise InvalidRepositoryUrl(problem)
    if full_name_of(url) is None:
        raise InvalidRepositoryUrl("The repository URL names no repository.")
    return url


def _check_branch(branch):
    problem = git_rules.branch_problem(branch or "")
    if problem is not None:
        raise InvalidBranch(problem)
    return branch


def to_dict(a):
    return {"id": str(a.id), "project_id": str(a.project_id), "url": git_rules.redact_url(a.url),
            "full_name": a.full_name, "branch": a.branch, "auto_deploy": a.auto_deploy,
            "is_active": a.is_active, "created_at": a.created_at.isoformat() + "Z"}


def add(project_id, url, *, branch="main", full_name=None, auto_deploy=True):
    url, branch = _check_url(url), _check_branch(branch)
    name = (full_name or "").strip().strip("/").lower() or full_name_of(url)
    if len(name) > 255:
        raise InvalidFullName("The repository's full name is too long.")
    with database.atomic():
        project = Project.get_or_none(Project.id == project_id, Project.deleted_at.is_null())
        if project is None:
            raise NotFound("Project not found.")
        try:
            with database.atomic():
                addon = AddonRepository.create(project=project, url=url, full_name=name,
                                               branch=branch, auto_deploy=auto_deploy,
                                               updated_at=clock.now())
                audit.record(project.organization_id, "addon_repository.add", "project",
                             project.id, {"addon_id": addon.id, "url": git_rules.redact_url(url),
                                          "branch": branch, "auto_deploy": auto_deploy})
                return addon
        except peewee.IntegrityError:
            raise AddonRepositoryExists(f"The project already has the add-on repository {name}.") from None


def list_for(project_id):
    if not Project.select().where(Project.id == project_id).exists():
        raise NotFound("Project not found.")
    return list(AddonRepository.select().where(AddonRepository.project == project_id)
                .order_by(AddonRepository.created_at, AddonRepository.id))


def update(addon_id, *, branch=None, auto_deploy=None, is_active=None):
    """Only the given fields change; takes effect from the next deployment."""
    with database.atomic():
        a = AddonRepository.get_or_none(AddonRepository.id == addon_id)
        if a is None:
            raise NotFound("Add-on repository not found.")
        if branch is not None:
            a.branch = _check_branch(branch)
        if auto_deploy is not None:
            a.auto_deploy = auto_deploy
        if is_active is not None:
            a.is_active = is_active
        a.updated_at = clock.now()
        a.save()
        audit.record(a.project.organization_id, "addon_repository.update", "project",
                     a.project_id, {"addon_id": a.id, "branch": branch, "auto_deploy": auto_deploy,
                                    "is_active": is_active})
        return a


def for_deploy(project_id):
    """The active add-on repositories as a deploy command carries them."""
    rows = (AddonRepository.select().where(AddonRepository.project == project_id,
                                           AddonRepository.is_active)
            .order_by(AddonRepository.created_at, AddonRepository.id))
    return [{"name": a.full_name.replace("/", "-"), "url": a.url, "branch": a.branch}
            for a in rows]
