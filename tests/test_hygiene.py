"""The test suite's own rules, checked over its text."""

from pathlib import Path

TESTS = Path(__file__).parent
# A sleep that stands in for no condition says so on its line, and why (a server's
# Retry-After, the interval a rate is measured over, a window for nothing to happen).
EXEMPT = "# not a wait:"


def _sleeps_then_asserts(text):
    """(line number, line) of each `time.sleep(` whose next two statements (blank and
    comment lines aside) hold an assert."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "time.sleep(" in line and EXEMPT not in line:
            after = [s for s in (x.strip() for x in lines[i + 1:])
                     if s and not s.startswith("#")][:2]
            if any(s.startswith("assert") for s in after):
                yield i + 1, line.strip()


def test_no_test_sleeps_then_asserts():
    """A sleep before an assertion bets that the thing is done by then: flaky on a
    loaded machine, slow on an idle one. Wait for what can be observed
    (tests/support/waiting.py: wait_for) or move a controllable clock (`fake_clock`)."""
    found = [f"{path.relative_to(TESTS)}:{number}: {line}"
             for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__)
             for number, line in _sleeps_then_asserts(path.read_text())]
    assert found == []


def test_the_check_sees_a_sleep_then_an_assert():
    def seen(text):
        return [number for number, _ in _sleeps_then_asserts(text)]

    assert seen("time.sleep(1)\n\nassert done()\n") == [1]
    assert seen("x()\ntime.sleep(1)  # the job's turn\n# then\nr = get()\nassert r\n") == [2]
    assert seen("while busy():\n    time.sleep(0.1)\nassert done()\n") == [2]
    assert seen("time.sleep(1)\na()\nb()\nassert done()\n") == []
    assert seen("time.sleep(1)  # not a wait: its Retry-After\nassert done()\n") == []
