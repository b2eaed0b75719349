"""A restore in place swaps the environment's whole database cluster
(agent/backups/cluster.py), against the real engine and PostgreSQL image: a
cluster made beside the live one, in its volume's folder, is swapped in and put
back; a swap an agent stop cut short is undone by the restore's journal, and what
a finished one left beside the cluster is removed."""

import json
import os

import pytest

from agent.backups import cluster, databases
from agent.backups.backups import Backups
from agent.config import RESTORE_JOURNAL
from tests.agent.backups import test_backups
from tests.agent.backups.test_backups import CREDENTIAL, healthy, notes, set_notes
from tests.support.waiting import wait_for

DATA = "/var/lib/postgresql/data"

env = test_backups.env  # the fixture, shared: a deployed environment with a notes table


def _beside(envs, env_id, body):
    """A second cluster in the folder beside the live one, as a recovery leaves it:
    made by a throwaway PostgreSQL of the environment's image and password, with one
    row, stopped cleanly. The live cluster holds the row 'live'."""
    set_notes(envs, env_id, [(1, "live")])
    n = envs._names(env_id)
    found = cluster.Cluster.of(envs, n)
    assert found is not None and found.data.name == "_data"
    found.discard()
    found.recovered.mkdir()
    os.chown(found.recovered, 999, 999)
    os.chmod(found.recovered, 0o700)
    live = envs._container(n["db"])
    copy = databases.run_throwaway(envs, live, f"{n['db']}-beside", env_id, "test",
                                   {str(found.recovered): {"bind": DATA, "mode": "rw"}})
    try:
        # Over TCP: the image's first start runs a server on its socket only, then stops it.
        wait_for(lambda: copy.exec_run(["psql", "-h", "127.0.0.1", "-U", "odoo", "-d", "odoo",
                                        "-c", "SELECT 1"])[0] == 0,
                 timeout=60, what="the cluster beside initialised")
        code, out = copy.exec_run(["psql", "-h", "127.0.0.1", "-U", "odoo", "-d", "odoo",
                                   "-v", "ON_ERROR_STOP=1",
                                   "-c", "CREATE TABLE notes (id int PRIMARY KEY, body text); "
                                         f"INSERT INTO notes VALUES (1, '{body}')"])
        assert code == 0, out
        copy.stop(timeout=30)
    finally:
        copy.remove(force=True)
    return found, live


def _left_beside(found):
    return sorted(p.name for p in found.data.parent.iterdir() if p.name.startswith("berth-"))


def test_a_swapped_cluster_serves_and_is_put_back(env):
    envs, env_id, _ = env
    found, live = _beside(envs, env_id, "recovered")
    lines = []
    found.swap(live, lambda level, msg: lines.append(msg))
    assert notes(envs, env_id) == [(1, "recovered")]
    assert any("the recovered cluster is in place" in line for line in lines)
    assert found.put_back(lambda *a: None)
    assert notes(envs, env_id) == [(1, "live")]
    wait_for(lambda: _left_beside(found) == [], timeout=30, what="the folders beside removed")


def test_a_swap_refuses_a_replaced_cluster_it_did_not_make(env):
    """A replaced cluster left from before is never mistaken for this swap's."""
    envs, env_id, _ = env
    found, live = _beside(envs, env_id, "recovered")
    found.replaced.mkdir()
    with pytest.raises(cluster.ClusterError):
        found.swap(live, lambda *a: None)
    assert notes(envs, env_id) == [(1, "live")]
    found.discard()


@pytest.mark.parametrize("cut", ["after the live cluster moved", "after the swap"])
def test_a_swap_cut_short_by_an_agent_stop_is_put_back_from_the_journal(env, cut):
    envs, env_id, _ = env
    n = envs._names(env_id)
    found, live = _beside(envs, env_id, "recovered")
    live.stop(timeout=30)
    found.data.rename(found.replaced)
    if cut == "after the swap":
        found.recovered.rename(found.data)
        live.start()
    (n["dir"] / RESTORE_JOURNAL).write_text(json.dumps({
        "environment_id": env_id, "safety_transfer_url": "http://127.0.0.1:9/unused",
        "safety_database": {}, "staging": True, "stopped": True, "database": False,
        "cluster": True}))
    lines = []
    assert Backups(envs, CREDENTIAL).resume_interrupted(
        lambda level, msg: lines.append(msg)) == [env_id], lines
    assert notes(envs, env_id) == [(1, "live")]
    assert healthy(envs, env_id)
    assert not (n["dir"] / RESTORE_JOURNAL).exists()
    assert any("put the replaced database cluster back" in line for line in lines)
    wait_for(lambda: _left_beside(found) == [], timeout=30, what="the folders beside removed")


def test_what_a_finished_swap_left_beside_is_removed_at_the_next_start(env):
    envs, env_id, _ = env
    found, live = _beside(envs, env_id, "recovered")
    found.swap(live, lambda *a: None)  # the agent stopped before it deleted `replaced`
    assert found.replaced.exists()
    lines = []
    assert Backups(envs, CREDENTIAL).resume_interrupted(
        lambda level, msg: lines.append(msg)) == []
    assert any(env_id in line for line in lines)
    wait_for(lambda: _left_beside(found) == [], timeout=30, what="the folders beside removed")
    assert notes(envs, env_id) == [(1, "recovered")]
