"""Deploy on git push (rule 10). A Git host posts a push event, signed with the
project's webhook secret (HMAC-SHA256 of the raw body). A push to the branch of
an environment with auto-deploy on queues a `git_push` deployment of the pushed
commit; a push to an active add-on repository with auto-deploy on redeploys
every auto-deploy environment of its project. Each delivery id is acted on once."""

import datetime as dt
import hashlib
import hmac
import re
from dataclasses import dataclass

import peewee
from limits import RateLimitItemPerMinute

from control_plane.infra import clock, secretbox, security
from control_plane.infra.db import database, for_update
from control_plane.inputs import safe_input
from control_plane.models import (
    AddonRepository,
    Environment,
    GitDelivery,
    GitWebhookSecret,
    Project,
)
from control_plane.services.projects.addon_repositories import full_name_of
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors, lifecycle, states
from control_plane.vocabulary.errors import NotFound
from protocol.kinds import TaskKind

LIMIT = RateLimitItemPerMinute(30)  # spec: incoming push webhook, 30 requests per minute
SECRET_PURPOSE = "git-webhook-secret"
SECRET_PREFIX = "gwh_"
DELIVERY_RETENTION = dt.timedelta(days=30)

_HMAC = re.compile(r"^(?:sha256=)?([0-9a-fA-F]{64})$")
_REPO = re.compile(r"^[\w.-]+(?:/[\w.-]+)+$", re.ASCII)
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
_BRANCH_REF = "refs/heads/"


@dataclass(frozen=True)
class Provider:
    event_headers: tuple
    delivery_headers: tuple
    signature_headers: tuple = ("X-Hub-Signature-256",)  # `sha256=<hex>`
    token_header: str | None = None  # GitLab sends the secret itself


_EVENT, _DELIVERY = ("X-Git-Event",), ("X-Git-Delivery",)
PROVIDERS = {
    "github": Provider(("X-GitHub-Event", *_EVENT), ("X-GitHub-Delivery", *_DELIVERY)),
    "gitea": Provider(("X-Gitea-Event", *_EVENT), ("X-Gitea-Delivery", *_DELIVERY),
                      signature_headers=("X-Hub-Signature-256", "X-Gitea-Signature")),
    "gitlab": Provider(("X-Gitlab-Event", *_EVENT),
                       ("Idempotency-Key", "X-Gitlab-Event-UUID", *_DELIVERY),
                       token_header="X-Gitlab-Token"),
    "generic": Provider(_EVENT, _DELIVERY),
}


def _header(headers, names):
    return next((headers[n] for n in names if headers.get(n)), None)


# --- per-project secrets ------------------------------------------------------

def provider_for(repo_url):
    host = (repo_url or "").lower()
    for word, name in (("github", "github"), ("gitlab", "gitlab"), ("gitea", "gitea"),
                       ("codeberg", "gitea"), ("forgejo", "gitea")):
        if word in host:
            return name
    return "generic"


def issue_secret(project_id, *, rotate=False, public_url):
    """A new secret for the project's push webhooks, returned this once. Without
    `rotate` an existing secret is kept (409); with it the old one stops working now."""
    secret = SECRET_PREFIX + security.random_token(40)
    sealed = secretbox.seal(secret, SECRET_PURPOSE)
    with database.atomic():
        project = Project.get_or_none(Project.id == project_id, Project.deleted_at.is_null())
        if project is None:
            raise NotFound("Project not found.")
        row = for_update(GitWebhookSecret.select().where(
            GitWebhookSecret.project == project.id)).first()
        if row is not None and not rotate:
            raise errors.SecretExists("The project already has a webhook secret; rotate it "
                                      "(--rotate) to get a new one; the old one then stops "
                                      "working.")
        try:
            with database.atomic():
                if row is None:
                    GitWebhookSecret.create(project=project, secret_encrypted=sealed)
                else:
                    GitWebhookSecret.update(secret_encrypted=sealed, rotated_at=clock.now()).where(
                        GitWebhookSecret.id == row.id).execute()
        except peewee.IntegrityError:
            raise errors.SecretExists("The project's webhook secret was just created; rotate "
                                      "it to get a new one.") from None
    provider = provider_for(project.git_repo_url)
    return {"project_id": str(project.id), "secret": secret, "provider": provider,
            "url": f"{public_url.rstrip('/')}/api/v1/webhooks/{provider}?project_id={project.id}"}


# --- receiving ------------------------------------------------------------------

def _parse(body):
    """(payload, problem): the JSON object, or why there is none."""
    try:
        payload = safe_input.loads(body)
    except ValueError:
        return None, "The body is not valid JSON."
    except safe_input.UnsafeInput as exc:  # e.g. a NUL or lone surrogate in `ref`
        return None, exc.message
    if not isinstance(payload, dict):
        return None, "The body must be a JSON object."
    return payload, None


def _repository(payload):
    """repository.full_name (GitLab: project.path_with_namespace), lower case; None if absent."""
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else None
    if name is None and isinstance(payload.get("project"), dict):
        name = payload["project"].get("path_with_namespace")
    if isinstance(name, str) and len(name) <= 255 and _REPO.match(name):
        return name.lower()
    return None


def _presented(provider, headers):
    """('hmac', hex) or ('token', value) as sent, ('bad', None) when malformed, None if absent."""
    for name in provider.signature_headers:
        value = headers.get(name)
        if value:
            m = _HMAC.match(value.strip())
            return ("hmac", m.group(1).lower()) if m else ("bad", None)
    if provider.token_header and headers.get(provider.token_header):
        return "token", headers[provider.token_header]
    return None


def _candidates(repo, project_id):
    """Projects (with their secret row) whose repository or an add-on repository is `repo`."""
    base = (Project.select(Project, GitWebhookSecret)
            .join(GitWebhookSecret, attr="webhook_secret").where(Project.deleted_at.is_null()))
    if project_id is not None:
        base = base.where(Project.id == project_id)
    found = {p.id: p for p in base.where(peewee.fn.LOWER(Project.git_repo_url).contains(repo))
             if full_name_of(p.git_repo_url) == repo}
    addon_projects = AddonRepository.select(AddonRepository.project).where(
        AddonRepository.full_name == repo)
    found.update((p.id, p) for p in base.where(Project.id.in_(addon_projects)))
    return sorted(found.values(), key=lambda p: p.id.hex)


def _signed_by(project, body, presented):
    secret = secretbox.unseal(project.webhook_secret.secret_encrypted, SECRET_PURPOSE)
    kind, value = presented
    if secret is None or value is None:
        return False
    if kind == "token":
        return hmac.compare_digest(secret.encode(), value.encode())
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), value.encode())


def _event(provider, headers):
    event = _header(headers, provider.event_headers)
    if not event:
        raise errors.MissingHeader(f"The {provider.event_headers[0]} header is missing.")
    # GitLab says "Push Hook", "Tag Push Hook"; the others "push", "ping".
    return event.strip().lower().removesuffix(" hook").replace(" ", "_")[:64]


@dataclass(frozen=True)
class Push:
    branch: str | None  # None: not a branch (a tag, a note)
    commit: str | None
    deleted: bool
    pusher: str | None = None  # who pushed, as the Git host names them
    before: str | None = None  # the branch's previous head (zeros: a new branch)


def _pusher(payload):
    """GitHub's `pusher.name`, Gitea's `pusher.login`/`username`, GitLab's `user_username`."""
    pusher = payload.get("pusher")
    names = [pusher.get(k) for k in ("name", "login", "username")] \
        if isinstance(pusher, dict) else []
    names.append(payload.get("user_username"))
    name = next((n for n in names if isinstance(n, str) and n.strip()), None)
    return name.strip()[:255] if name else None


def _push(payload):
    ref = payload.get("ref")
    if not isinstance(ref, str) or not ref or len(ref) > 1024:
        raise errors.InvalidPayload("ref is missing or not a string.")
    if not isinstance(payload.get("commits"), list):
        raise errors.InvalidPayload("commits is missing or not an array.")
    after = payload.get("after")
    if after is not None and (not isinstance(after, str) or not _COMMIT.match(after)):
        raise errors.InvalidPayload("after is not a commit id.")
    deleted = payload.get("deleted") is True or (after is not None and not after.strip("0"))
    commit = after
    if commit is None:  # no `after`: the head commit, else the last commit listed
        head = payload.get("head_commit") or (payload["commits"] or [None])[-1]
        commit = head.get("id") if isinstance(head, dict) else None
        if not isinstance(commit, str) or not _COMMIT.match(commit):
            commit = None
    branch = ref[len(_BRANCH_REF):] if ref.startswith(_BRANCH_REF) else None
    if branch is not None and (not branch or len(branch) > 255):
        raise errors.InvalidPayload("ref names no branch.")
    before = payload.get("before")
    before = before.lower() if isinstance(before, str) and _COMMIT.match(before) \
        and before.strip("0") else None
    return Push(branch, None if deleted else commit and commit.lower(), deleted,
                _pusher(payload), before)


def receive(provider_name, headers, body, *, remote_addr, project_id=None, berth, also=None):
    """Handle one delivery; returns (summary, rate-limit window state). Raises 401 for
    an unsigned or badly signed request, 400 for a payload it cannot read. `also`
    (project, push) -> a list, what else a project's push does, inside the same
    once-only transaction (its automation rules), summed up as `automation_runs`."""
    provider = PROVIDERS.get(provider_name)
    if provider is None:
        raise NotFound("Unknown Git provider.")
    payload, problem = _parse(body)
    repo = _repository(payload) if payload is not None else None
    # Counted per source address and claimed repository, before anything else: an
    # unsigned flood is limited too, and cannot use up a real repository's allowance
    # unless it comes from the Git host's own address.
    state = berth.limiter.hit(LIMIT, "git-push", provider_name, remote_addr or "-", repo or "-")
    presented = _presented(provider, headers)
    if presented is None:
        raise errors.MissingSignature("The request is not signed (X-Hub-Signature-256).")
    if problem:
        raise errors.InvalidPayload(problem)
    if repo is None:
        raise errors.InvalidPayload("repository.full_name is missing or not a repository name.")
    projects = [p for p in _candidates(repo, project_id) if _signed_by(p, body, presented)]
    if not projects:
        raise errors.InvalidSignature("The signature does not match.")

    event = _event(provider, headers)
    delivery_id = _header(headers, provider.delivery_headers)
    summary = {"event": event, "delivery_id": delivery_id, "repository": repo, "branch": None,
               "commit": None, "duplicate": False, "ignored": True, "message": "",
               "deployments": [], "skipped": [], "automation_runs": []}
    if event != "push":
        summary["message"] = f"The {event!r} event was ignored: only push events deploy."
        return summary, state
    push = _push(payload)
    summary.update(branch=push.branch, commit=push.commit)
    # A deleted branch deploys nothing, but may end its preview environments
    # (automation rules): handled once, like a push, when it says its delivery.
    if push.branch is None or (push.deleted and (also is None or not delivery_id)):
        summary["message"] = ("A deleted branch deploys nothing." if push.deleted
                              else "Only pushes to branches deploy.")
        return summary, state
    if not delivery_id or len(delivery_id) > 255:
        raise errors.MissingHeader(
            f"The {provider.delivery_headers[0]} header is missing or too long.")
    results, duplicate = _handle_once(projects, provider_name, delivery_id, repo, push, berth,
                                      also)
    for result in results:
        summary["deployments"] += result["deployments"]
        summary["skipped"] += result["skipped"]
        summary["automation_runs"] += result.get("automation_runs", [])
    summary.update(duplicate=duplicate, ignored=False, message=(
        "This delivery was already handled; nothing was done again." if duplicate else
        f"{len(summary['deployments'])} deployment(s) queued, "
        f"{len(summary['skipped'])} environment(s) skipped."))
    if push.deleted:
        summary.update(ignored=not summary["automation_runs"],
                       message="A deleted branch deploys nothing; "
                               f"{len(summary['automation_runs'])} automation run(s).")
    return summary, state


def _handle_once(projects, provider_name, delivery_id, repo, push, berth, also=None):
    """The per-project results and whether they are a stored duplicate. The delivery
    row is inserted first: a concurrent duplicate waits on its unique index, then
    reads the first one's result."""
    for attempt in range(3):
        try:
            with database.atomic():
                rows = [GitDelivery.create(project=p, provider=provider_name,
                                           delivery_id=delivery_id, event="push")
                        for p in projects]
                results = []
                for p, row in zip(projects, rows, strict=True):
                    result = _deploy_project(p, repo, push, berth, provider_name, delivery_id)
                    if also is not None and full_name_of(p.git_repo_url) == repo:
                        result["automation_runs"] = also(p, push)
                    GitDelivery.update(result=result).where(GitDelivery.id == row.id).execute()
                    GitDelivery.delete().where(
                        GitDelivery.project == p.id,
                        GitDelivery.created_at < clock.now() - DELIVERY_RETENTION).execute()
                    results.append(result)
                return results, False
        except peewee.IntegrityError:
            stored = list(GitDelivery.select().where(
                GitDelivery.project.in_([p.id for p in projects]),
                GitDelivery.provider == provider_name, GitDelivery.delivery_id == delivery_id))
            if stored:
                return [s.result or {"deployments": [], "skipped": []} for s in stored], True
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _deploy_project(project, repo, push, berth, provider_name, delivery_id):
    """Inside the caller's transaction: queue the deployments one project's push asks
    for (the gateway is woken once it commits)."""
    if push.deleted:
        return {"deployments": [], "skipped": []}
    own_repo = full_name_of(project.git_repo_url) == repo
    addon_push = (AddonRepository.select().where(
        AddonRepository.project == project.id, AddonRepository.full_name == repo,
        AddonRepository.branch == push.branch, AddonRepository.is_active,
        AddonRepository.auto_deploy).exists())
    envs = for_update(Environment.select().where(
        Environment.project == project.id, Environment.is_active, Environment.auto_deploy)
        .order_by(Environment.id))
    result = {"deployments": [], "skipped": []}
    for env in envs:
        if own_repo and (env.branch or project.default_branch or "main") == push.branch:
            commit, source = push.commit, "project"
        elif addon_push:  # the project's code at its branch head, the add-ons at theirs
            commit, source = None, "addon_repository"
        else:
            continue
        ids = {"project_id": str(project.id), "environment_id": str(env.id)}
        reason = _not_deployable(env)
        if reason:
            result["skipped"].append({**ids, **reason})
            continue
        d = engine.start(env, TaskKind.DEPLOY, berth=berth,
                         trigger=states.Trigger.GIT_PUSH, record={
                             "git_commit": commit, "extra_data": {"git_push": {
                                 "provider": provider_name, "delivery_id": delivery_id,
                                 "repository": repo, "branch": push.branch,
                                 "commit": push.commit}}})
        result["deployments"].append({**ids, "deployment_id": str(d.id), "source": source,
                                      "git_commit": commit})
    return result


def _not_deployable(env):
    if env.server_id is None:
        return {"reason": errors.NoServer.code, "message": "The environment has no server."}
    if engine.in_progress(env.id):
        return {"reason": errors.DeploymentInProgress.code,
                "message": "A deployment is already pending or running; push again or "
                           "deploy once it has finished."}
    if not lifecycle.allowed(TaskKind.DEPLOY, env.status):
        return {"reason": "not_deployable",
                "message": f"An environment that is {env.status} cannot be deployed."}
    return None
