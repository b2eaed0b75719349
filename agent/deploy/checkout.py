"""The code a deploy puts on the server: the project's repository at its branch (or
an exact commit, for rollbacks) as the add-ons directory, and each add-on repository
in its own directory under it. The code deployed until now is kept aside
(PREVIOUS_ADDONS) until the deploy stands (agent/deploy/environments.py)."""

import re
import shutil

from agent.deploy import git as git_cmd

CONTAINER_ADDONS = "/mnt/extra-addons"
ADDON_REPOS = ".addon-repositories"  # inside the add-ons directory: one per repository
PREVIOUS_ADDONS = "addons.previous"  # beside it: the code deployed before, during a deploy


def project(git, addons, log):
    """The project's add-ons at the branch (or an exact commit, for rollbacks):
    {git_commit, git_message, git_author}, or {} without a repository."""
    if not git or not git.get("url"):
        log("info", "no Git repository: deploying without add-ons")
        return {}
    work = addons.with_name("addons.new")
    shutil.rmtree(work, ignore_errors=True)
    url, branch, commit = git["url"], git.get("branch") or "main", git.get("commit")
    log("info", f"checking out {git_cmd.redact(url)} at {commit or branch}")
    git_cmd.clone(url, branch, work, what="the repository")
    if commit:
        git_cmd.checkout(work, commit, what="the repository")
    sha, said = git_cmd.head(work), git_cmd.described(work)
    # The code deployed until now, kept until this deploy stands (a failed
    # module update puts it back).
    shutil.rmtree(addons.with_name(PREVIOUS_ADDONS), ignore_errors=True)
    if addons.exists():
        addons.rename(addons.with_name(PREVIOUS_ADDONS))
    work.rename(addons)
    log("info", f"add-ons at commit {sha}")
    return {"git_commit": sha, **said}


def addon_repositories(repos, addons, log):
    """Each add-on repository at its branch head (or at the exact commit a
    rollback names), in its own directory under the add-ons directory (mounted
    with it), made afresh on every deploy. Returns the commits, in order."""
    target, work = addons / ADDON_REPOS, addons / f"{ADDON_REPOS}.new"
    shutil.rmtree(work, ignore_errors=True)
    if repos:
        work.mkdir(parents=True)
    commits = []
    for repo, name in zip(repos or (), addon_repo_names(repos), strict=True):
        url, branch = repo.get("url") or "", repo.get("branch") or "main"
        commit, what = repo.get("commit"), f"the add-on repository {name}"
        log("info", f"checking out add-on repository {git_cmd.redact(url)} at "
                    f"{commit or branch}")
        # A branch head needs only the newest commit; an older commit needs history.
        git_cmd.clone(url, branch, work / name, what=what, shallow=not commit)
        if commit:
            git_cmd.checkout(work / name, commit, what=what)
        commits.append(git_cmd.head(work / name))
    shutil.rmtree(target, ignore_errors=True)
    if repos:
        work.rename(target)
    return commits


def addon_repo_names(repos):
    """A safe, unique directory name per add-on repository, in order."""
    names = []
    for i, repo in enumerate(repos or ()):
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(repo.get("name") or ""))
        base = base.strip(".-")[:100] or f"repository-{i + 1}"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def addons_path(spec):
    """The project's add-ons first (the first directory of a name wins), then
    each add-on repository's."""
    names = addon_repo_names(spec.get("addon_repositories"))
    return ",".join([CONTAINER_ADDONS] + [f"{CONTAINER_ADDONS}/{ADDON_REPOS}/{n}" for n in names])
