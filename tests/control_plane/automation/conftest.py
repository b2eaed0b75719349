"""Automation rules without an agent: the stand of the backup tests (the agent's
acknowledgement and result played through the services the gateway calls), and
the push tests' project (`setup`)."""

from tests.control_plane.backups.conftest import RESULT, Bk, at, bearer, bk, store  # noqa: F401
from tests.control_plane.projects.test_git_push import setup  # noqa: F401
