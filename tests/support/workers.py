"""How `make test` spreads the suite over workers (pytest-xdist, `-n`).

The unit a worker is given is a module, so a module's fixtures (a deployed
environment, a browser, a control plane) are made once. Modules that use what the
Docker engine holds once (the `berth-proxy` container; the Swarm and the ports a
compose balancer publishes) form one unit per resource, so they never overlap; the
long, independent tests of `BY_TEST` are a unit each. The longest units go first
(`FIRST`, from the suite's --durations), so that none is left running alone at the end."""

import os

import pytest

GROUPS = {"tests/e2e/proxy/test_proxy.py": "berth-proxy",
          "tests/e2e/automation/test_automation_flow.py": "berth-proxy",
          "tests/control_plane/scale_out/": "swarm",
          "tests/control_plane/test_compose_one_machine.py": "swarm"}
BY_TEST = ("tests/control_plane/test_schemathesis.py",)
FIRST = ("tests/e2e/proxy/test_proxy.py", "tests/e2e/automation/test_automation_flow.py",
         "tests/control_plane/scale_out/", "tests/control_plane/test_compose_one_machine.py",
         "tests/control_plane/test_schemathesis.py", "tests/control_plane/test_admin_cli.py",
         "tests/e2e/deploys/test_lifecycle_matrix.py", "tests/e2e/servers/test_agent_upgrade.py",
         "tests/e2e/servers/test_ssh_servers.py",
         "tests/control_plane/deploys/test_lifecycle_model.py",
         "tests/e2e/backups/test_backup_flow.py", "tests/e2e/deploys/test_module_update_flow.py",
         "tests/control_plane/test_fuzz.py", "tests/e2e/deploys/test_deploy_flow.py",
         "tests/control_plane/test_wheelhouse.py", "tests/e2e/servers/test_install_e2e.py",
         "tests/e2e/backups/test_odoo_flow.py", "tests/berthctl/test_e2e.py",
         "tests/control_plane/console/test_console_browser.py",
         "tests/e2e/servers/test_fleet_alerts.py", "tests/control_plane/test_installed_package.py",
         "tests/berthctl/test_basics.py")


def unit(nodeid):
    path = nodeid.split("::", 1)[0]
    group = next((g for prefix, g in GROUPS.items() if path.startswith(prefix)), None)
    return group or (nodeid if path.startswith(BY_TEST) else path)


def _rank(item):
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the collection's order: longest first

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return unit(nodeid)

    return ByUnit(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike (stable)
        items.sort(key=_rank)
