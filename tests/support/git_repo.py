"""The Git repositories end-to-end tests deploy from: add-on modules committed in a
working copy and pushed to a bare repository that the agent clones by its file://
URL. `shop_repo`: the usual one, the add-on `shop` at version 1.0 on `main` (and
on each other branch named)."""

import json
import subprocess

GIT = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]


def manifest(module, version):
    """An add-on's __manifest__.py as these repositories write it."""
    return json.dumps({"name": module.replace("_", " ").capitalize(), "version": version})


class Repo:
    """A working copy (`work`, under `tmp`) and the bare repository it pushes its
    `branch` to (`bare`, `tmp`/`name`.git; `url`: file://)."""

    def __init__(self, tmp, name="repo", work="work", branch="main"):
        self.work, self.bare, self.branch = tmp / work, tmp / f"{name}.git", branch
        self.url = f"file://{self.bare}"
        self.work.mkdir(parents=True)
        self.git("init", "-q", f"--initial-branch={branch}")
        subprocess.run(["git", "init", "-q", "--bare", str(self.bare)], check=True)

    def git(self, *args):
        return subprocess.run([*GIT, *args], cwd=self.work, check=True, capture_output=True,
                              text=True).stdout.strip()

    def commit(self, versions, message="v1"):
        """Each module of `versions` ({module: version}) written at its version, committed
        and pushed; returns the commit."""
        for module, version in versions.items():
            (self.work / module).mkdir(exist_ok=True)
            (self.work / module / "__manifest__.py").write_text(manifest(module, version))
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        self.git("push", "-q", str(self.bare), self.branch)
        return self.git("rev-parse", "HEAD")

    def branches(self, *names):
        """Other branches at the current commit, pushed."""
        if not names:
            return
        for name in names:
            self.git("branch", name)
        self.git("push", "-q", str(self.bare), *names)


def shop_repo(tmp, branches=("main",)):
    """The bare repository's path (`tmp`/repo.git; its working copy `tmp`/work)."""
    repo = Repo(tmp)
    repo.commit({"shop": "1.0"})
    repo.branches(*(b for b in branches if b != "main"))
    return repo.bare
