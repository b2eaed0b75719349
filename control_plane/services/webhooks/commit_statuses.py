"""Builds' results on the commit in the project's forge: GitHub's, GitLab's and
Gitea's (Forgejo's) commit status APIs, with a link to the build's page in the
console. The `commit-statuses` job sends each build's status when it changed (queued
or running: pending; passed: success; failed: failure; error or cancelled: error),
through the outgoing webhooks' sender (its address policy, CA bundle and timeouts).
A forge that fails is tried again later (30 s, doubling, at most an hour apart),
MAX_ATTEMPTS times; a newer status of the build replaces one not yet sent."""

import datetime as dt
import json
import urllib.parse

from control_plane.infra import clock, secretbox
from control_plane.infra.db import database
from control_plane.models import Build, Project
from control_plane.models.project import FORGE_DEFAULT_API, FORGE_TOKEN_PURPOSE
from control_plane.services.webhooks import net

CONTEXT = "berth/build"
BATCH, MAX_ATTEMPTS = 50, 8
FIRST_RETRY, LONGEST_RETRY = dt.timedelta(seconds=30), dt.timedelta(hours=1)
# A build's status in each forge's words.
STATES = {
    "github": {"queued": "pending", "running": "pending", "passed": "success",
               "failed": "failure", "error": "error", "cancelled": "error"},
    "gitlab": {"queued": "pending", "running": "running", "passed": "success",
               "failed": "failed", "error": "failed", "cancelled": "canceled"},
    "gitea": {"queued": "pending", "running": "pending", "passed": "success",
              "failed": "failure", "error": "error", "cancelled": "error"},
}


def repository(git_url):
    """`owner/name` (GitLab: the full path) of a repository URL, or None."""
    path = urllib.parse.urlsplit(git_url or "").path.strip("/").removesuffix(".git")
    return path if "/" in path else None


def request(provider, api_url, token, repo, commit, state, url, description):
    """(URL, body, headers) of one status in the forge's API."""
    base = (api_url or FORGE_DEFAULT_API[provider]).rstrip("/")
    body = {"state": state, "target_url": url, "description": description[:140]}
    if provider == "gitlab":
        path = f"/projects/{urllib.parse.quote(repo, safe='')}/statuses/{commit}"
        body["name"] = CONTEXT
        headers = {"PRIVATE-TOKEN": token}
    else:
        path = f"/repos/{repo}/statuses/{commit}"
        body["context"] = CONTEXT
        headers = ({"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
                   if provider == "github" else {"Authorization": f"token {token}"})
    return base + path, json.dumps(body).encode(), {**headers,
                                                    "Content-Type": "application/json"}


def describe(build):
    counts = build.counts or {}
    if build.status == "passed":
        return f"passed: {counts.get('tests', 0)} tests"
    if build.status == "failed":
        return f"failed: {build.reason or 'a test failed'}"
    if build.status == "running":
        return f"running ({build.stage or 'create'})"
    return {"queued": "queued: its server runs another build",
            "cancelled": "cancelled: a newer push has its own build"}.get(
        build.status, f"error: {build.reason or 'the tests did not run'}")


def run(berth):
    """The job: the builds whose status changed since it was reported, sent."""
    now = clock.now()
    due = list(Build.select(Build, Project).join(Project, on=(Build.project == Project.id))
               .where(Project.forge_provider.is_null(False), Build.commit.is_null(False),
                      (Build.status_reported.is_null()) | (Build.status_reported != Build.status),
                      (Build.status_next_at.is_null()) | (Build.status_next_at <= now))
               .order_by(Build.created_at).limit(BATCH))
    return [_send(berth, build, build.project, now) for build in due]


def _send(berth, build, project, now):
    settings = berth.settings
    token = secretbox.unseal(project.forge_token or "", FORGE_TOKEN_PURPOSE)
    repo = repository(project.git_repo_url)
    status = build.status
    if token is None or repo is None:
        error = "the forge token cannot be read (set it again)" if token is None \
            else "the project's repository URL names no repository"
        return _failed(build, status, error, now, give_up=True)
    link = f"{(settings.get('PUBLIC_URL') or '').rstrip('/')}/builds/{build.id}"
    url, body, headers = request(project.forge_provider, project.forge_api_url, token, repo,
                                 build.commit, STATES[project.forge_provider][status], link,
                                 describe(build))
    sent = net.post(url, body, headers, timeout=10.0,
                    allow_private=settings.get("WEBHOOK_ALLOW_PRIVATE", False),
                    ca_bundle=settings.get("WEBHOOK_CA_BUNDLE"))
    if not sent.ok:
        return _failed(build, status, sent.error, now)
    with database.atomic():
        Build.update(status_reported=status, status_attempts=0, status_next_at=None,
                     status_error=None).where(Build.id == build.id,
                                              Build.status == status).execute()
    return (build.id, status, True)


def _failed(build, status, error, now, give_up=False):
    attempts = build.status_attempts + 1
    give_up = give_up or attempts >= MAX_ATTEMPTS
    wait = min(FIRST_RETRY * 2 ** (attempts - 1), LONGEST_RETRY)
    Build.update(status_attempts=0 if give_up else attempts,
                 status_next_at=None if give_up else now + wait,
                 status_error=str(error)[:500],
                 **({"status_reported": status} if give_up else {})).where(
        Build.id == build.id, Build.status == status).execute()
    return (build.id, status, False)
