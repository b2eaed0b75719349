"""The console's terminal in a real browser (the stand of test_console_browser.py:
`berth serve`, whose HTTP server carries the WebSockets, a real agent and the
environment it deployed). A user with the shell permission follows the environment's
Shell link; the environment made production, a wrong name is refused on the page and
the right one opens the shell; the terminal is fitted to its box and says its size to
the container (`stty size`, again after the window narrows), computes `echo $((6*7))`
and shows `exit 3`'s status. The page keeps its Content-Security-Policy (the WebSocket
is `connect-src 'self'`) and passes axe-core in light and dark colours and on a phone."""

import pytest

from control_plane.models import Environment
from control_plane.services.servers.shells import PERMISSION
from tests.control_plane.console.test_console_browser import (  # noqa: F401 - fixtures
    accessibility_violations,
    clean,
    deployed,
    shot,
    stand,
)

pytestmark = pytest.mark.slow
# The terminal's lines, as its buffer holds them (read over the debugging protocol).
LINES = """() => {
    const b = window.berthTerminal.buffer.active, lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
    return lines;
}"""
SIZE = "() => [window.berthTerminal.rows, window.berthTerminal.cols]"


@pytest.fixture(scope="module")
def sheller(stand):  # noqa: F811
    """A full-access user who may open shells, signed in once."""
    made = stand.served.admin("user", "create", "--org", str(stand.org.id), "--name", "ops",
                              "--email", "ops@example.com", "--access", "full_access",
                              "--permission", "project.environments.deploy",
                              "--permission", PERMISSION)
    password = stand.served.admin("user", "password", made["id"], "--generate")["password"]
    stand.users["ops"] = (made["id"], made["email"], password)
    return "ops"


def _has_line(page, text, timeout=30_000):
    page.wait_for_function("text => { const b = window.berthTerminal.buffer.active;"
                           " for (let i = 0; i < b.length; i++)"
                           " if (b.getLine(i).translateToString(true).trim() === text) return true;"
                           " return false; }", arg=text, timeout=timeout)


def _type(page, line):
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def test_the_terminal_runs_a_shell_in_the_environment(stand, deployed, sheller):  # noqa: F811
    # Users without the permission are not linked to the shell.
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    assert page.get_by_role("link", name="Shell", exact=True).count() == 0
    page.context.close()

    kind = Environment.get_by_id(deployed.id).environment_type
    Environment.update(environment_type="production").where(
        Environment.id == deployed.id).execute()
    try:
        page = stand.page(sheller)
        page.goto(f"{stand.url}/environments/{deployed.id}")
        page.get_by_role("link", name="Shell", exact=True).click()
        page.wait_for_url(f"**/environments/{deployed.id}/shell")
        status = page.locator("#shell-status")
        page.get_by_label("Type the name").fill("staging")
        page.get_by_role("button", name="Open").click()
        page.locator('#shell-status[data-state="error"]').wait_for()
        assert status.inner_text() == "Type the name, Staging, exactly to open its shell."
        assert page.locator("#terminal").is_hidden()
        # The refusal's answer is the only thing the browser complained of.
        assert [" 422 " in said for said in page.problems] == [True], page.problems
        page.problems.clear()

        page.get_by_label("Type the name").fill("Staging")
        page.get_by_role("button", name="Open").click()
        page.locator('#shell-status[data-state="open"]').wait_for(timeout=30_000)
        assert status.inner_text() == "Connected: shell."
        assert page.get_by_role("button", name="Open").is_disabled()

        # The container's terminal has the size the page fitted to its box.
        rows, cols = page.evaluate(SIZE)
        assert rows >= 10 and cols >= 80, (rows, cols)
        _type(page, "stty size")
        _has_line(page, f"{rows} {cols}")
        _type(page, "echo $((6*7))")
        _has_line(page, "42")
        shot(page, "shell")
        assert accessibility_violations(page) == [], "shell opened"

        page.set_viewport_size({"width": 640, "height": 720})  # fitted again, said again
        page.wait_for_function(f"() => window.berthTerminal.cols < {cols}")
        rows, narrower = page.evaluate(SIZE)
        _type(page, "stty size")
        _has_line(page, f"{rows} {narrower}")

        _type(page, "exit 3")
        page.locator('#shell-status[data-state="exit"]').wait_for(timeout=30_000)
        assert status.inner_text() == "The session ended: exit status 3."
        assert page.get_by_role("button", name="Open").is_enabled()
        assert "42" in page.evaluate(LINES)
        clean(page)

        page.reload()
        row = page.locator("table tbody tr").first
        assert row.locator('[data-label="Exit status"]').inner_text() == "3"
        assert "(exited)" in row.locator('[data-label="Ended"]').inner_text()
        page.context.close()
    finally:
        Environment.update(environment_type=kind).where(
            Environment.id == deployed.id).execute()


def test_the_shell_page_passes_axe_and_has_a_dark_mode(stand, deployed, sheller):  # noqa: F811
    path = f"{stand.url}/environments/{deployed.id}/shell"
    for scheme in ("light", "dark", "phone"):
        page = stand.page(sheller, width=390, height=844) if scheme == "phone" \
            else stand.page(sheller)
        page.emulate_media(color_scheme="dark" if scheme == "dark" else "light")
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert accessibility_violations(page) == [], scheme
        if scheme == "phone":
            shot(page, "shell-390")
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        clean(page)
        page.context.close()
