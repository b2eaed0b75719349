"""`berthctl mails` against the real `berth serve` (no agent): a production
environment has no caught mail (409, exit 1, the API's message on stderr), a server
without its agent is exit 5, and ids that are not ones are refused before any request
(exit 2). Real caught mail through a real agent: tests/agent/test_mail_catcher.py."""

from control_plane.app import create_app
from control_plane.models import Environment, Organization
from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.conftest import World


def _environments(served):
    """A production and a staging environment, running as far as the control plane
    knows (arranged in its database: no agent deploys them)."""
    world = World(create_app({"DATA_DIR": served.env["CP_DATA_DIR"], "PROXY_IMAGE": ""}))
    project = world.project(Organization.get_by_id(served.org))
    prod, staging = world.environment(project), world.environment(project)
    Environment.update(environment_type="production").where(Environment.id == prod.id).execute()
    Environment.update(environment_type="staging").where(Environment.id == staging.id).execute()
    return str(prod.id), str(staging.id)


def test_production_has_none_an_absent_agent_is_said_and_bad_ids_are_refused(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    prod, staging = _environments(served)
    for args in (("mails", "list", prod), ("mails", "show", prod, "1-abc"),
                 ("-o", "json", "mails", "list", prod, "--limit", "5")):
        r = berthctl(*args, env=env)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stdout == "" and r.stderr == (
            "berthctl: error: A production environment sends its mail out: none is caught. "
            "(no_mail_catcher) [HTTP 409]\n")
        no_traceback(r)
    # Outside production the agent is asked: none is connected (a server error, exit 5).
    r = berthctl("mails", "list", staging, env=env)
    assert r.returncode == 5 and "(server_unreachable) [HTTP 502]" in r.stderr, r.stderr

    for args, said in ((("mails", "list", "not-an-id"), "ENV_ID"),
                       (("mails", "list", prod, "--limit", "0"), "--limit"),
                       (("mails", "show", prod, "../../servers"), "is not a mail id"),
                       (("mails", "show", prod), "Missing argument 'MAIL_ID'")):
        r = berthctl(*args, env=env)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)
        no_traceback(r)
