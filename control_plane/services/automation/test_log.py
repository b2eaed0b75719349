"""Each test's outcome read from the ERP's log, as Odoo (17 and later) writes it:

    2026-12-03 10:00:01,234 7 INFO db odoo.addons.shop.tests.test_order: Starting TestOrder.test_total ...
    2026-12-03 10:00:01,300 7 ERROR db odoo.addons.shop.tests.test_order: FAIL: TestOrder.test_total
    Traceback (most recent call last):
      ...
    2026-12-03 10:00:01,310 7 INFO db odoo.addons.shop.tests.test_order: skipped TestOrder.test_x : why
    2026-12-03 10:00:02,000 7 ERROR db odoo.modules.module: Can not `import` the tests of shop.
    2026-12-03 10:00:02,100 7 ERROR db odoo.tests.result: 1 failed, 0 error(s) of 3 tests when loading database 'db'

A record is its first line and the lines after it without a time. A test's time is
from its `Starting` to the next record, as close as the log tells it."""

import datetime as dt
import re

RECORD = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \d+ ([A-Z]+) \S+ (\S+): (.*)$")
TEST_LOGGER = re.compile(r"^odoo\.addons\.([A-Za-z0-9_]+)\.tests(?:\.|$)")
STARTING = re.compile(r"^Starting (\S+) \.\.\.$")
FAILED = re.compile(r"^(FAIL|ERROR): (\S+)$")
SKIPPED = re.compile(r"^skipped (\S+) : (.*)$")
NO_IMPORT = re.compile(r"^Can not `import` the tests of ([A-Za-z0-9_]+)\.?$")
SUMMARY = re.compile(r"(\d+) failed, (\d+) error\(s\) of (\d+) tests")
MAX_TESTS, MAX_TEXT = 2000, 20_000
ORDER = {"error": 0, "failed": 1, "skipped": 2, "passed": 3}


def _records(text):
    record = None
    for line in text.splitlines():
        m = RECORD.match(line)
        if m:
            if record:
                yield record
            at = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            record = [at, m.group(2), m.group(3), [m.group(4)]]
        elif record:
            record[3].append(line)
    if record:
        yield record


def parse(text):
    """(tests, counts, summary): the tests, failures and errors first, each
    {name, module, status, seconds, failure}; their counts; and Odoo's own summary
    line's numbers {failed, errors, tests} (None when the log has none)."""
    tests, by_name, timing, summary = [], {}, None, None
    for at, _level, logger, lines in _records(text or ""):
        if timing is not None:  # the test that started last ends at this record
            timing[0]["seconds"] = round((at - timing[1]).total_seconds(), 3)
            timing = None
        first, rest = lines[0], "\n".join(lines[1:])
        test_module = TEST_LOGGER.match(logger)
        if test_module and (m := STARTING.match(first)) and len(tests) < MAX_TESTS:
            test = {"name": m.group(1), "module": test_module.group(1), "status": "passed",
                    "seconds": None, "failure": None}
            tests.append(test)
            by_name[(test["module"], test["name"])] = test
            timing = (test, at)
        elif test_module and (m := FAILED.match(first)):
            test = by_name.get((test_module.group(1), m.group(2)))
            if test is not None:
                test["status"] = "failed" if m.group(1) == "FAIL" else "error"
                test["failure"] = rest[-MAX_TEXT:] or first
        elif test_module and (m := SKIPPED.match(first)):
            test = by_name.get((test_module.group(1), m.group(1)))
            if test is not None:
                test["status"], test["failure"] = "skipped", m.group(2)[:MAX_TEXT]
        elif (m := NO_IMPORT.match(first)) and len(tests) < MAX_TESTS:
            tests.append({"name": f"{m.group(1)}.tests", "module": m.group(1),
                          "status": "error", "seconds": None,
                          "failure": (rest or first)[-MAX_TEXT:]})
        elif logger == "odoo.tests.result" and (m := SUMMARY.search(first)):
            summary = {"failed": int(m.group(1)), "errors": int(m.group(2)),
                       "tests": int(m.group(3))}
    counts = {"tests": len(tests)}
    for status in ("passed", "failed", "error", "skipped"):
        counts[status] = sum(1 for t in tests if t["status"] == status)
    tests.sort(key=lambda t: ORDER[t["status"]])  # stable: the log's order within each
    return tests, counts, summary
