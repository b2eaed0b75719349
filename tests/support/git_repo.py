"""The Git repository end-to-end tests deploy from: one add-on (`shop`, version 1.0)
committed on `main` (and on each other branch named), pushed to a bare repository
that the agent clones by its file:// URL."""

import subprocess

GIT = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]


def shop_repo(tmp, branches=("main",)):
    """The bare repository's path (under `tmp`)."""
    work, bare = tmp / "work", tmp / "repo.git"
    (work / "shop").mkdir(parents=True)
    (work / "shop" / "__manifest__.py").write_text('{"name": "Shop", "version": "1.0"}')
    for cmd in (["git", "init", "-q", "--initial-branch=main"], [*GIT, "add", "-A"],
                [*GIT, "commit", "-qm", "v1"],
                *(["git", "branch", b] for b in branches if b != "main"),
                ["git", "init", "-q", "--bare", str(bare)],
                ["git", "push", "-q", str(bare), *branches]):
        subprocess.run(cmd, cwd=work, check=True)
    return bare
