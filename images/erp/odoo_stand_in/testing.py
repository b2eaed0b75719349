"""Odoo's test runner (`--test-enable`, `--test-tags`), for add-ons whose tests use only
what the stand-in has: `from odoo.tests import TransactionCase, tagged`, `self.env.cr`
and `self.env['a.b'].search_count([])`.

As Odoo 17 runs them: a module's tests are the `test_*` submodules its `tests`
package imports; the `at_install` ones run right after the module is loaded (in
dependency order: only the modules installed or updated by -i/-u, else every installed
one), the `post_install` ones once all are loaded. A test class's default tags are
`standard` and `at_install`; `--test-tags` selects by `[-][tag][/module][:class][.method]`
(`--test-enable` alone means `+standard`). Each test runs in a transaction rolled back
after it. The log is Odoo's: `Starting Class.method ...` on the test module's logger,
a failure as `FAIL: Class.method` (an exception: `ERROR: ...`) with its traceback, a
skip as `skipped ...`, then per module `Module m loaded in ...` and the summary
`N failed, N error(s) of N tests when loading database 'db'`."""

import importlib
import inspect
import logging
import re
import sys
import time
import types
import unittest

from odoo_stand_in.env import SUPERUSER_ID, Cursor, Environment, odoo_module

DEFAULT_TAGS = frozenset({"standard", "at_install"})
_SPEC = re.compile(r"^([+-]?)(\*|\w*)(?:/([\w.-]+))?(?::(\w*))?(?:\.(\w*))?$")
log = logging.getLogger("odoo.modules.loading")


class TagsSelector:
    """Odoo's: a comma-separated spec; a test is selected when an include matches and
    no exclude does. An include without a tag means `standard`; `*` means any tag."""

    def __init__(self, spec):
        self.include, self.exclude = set(), set()
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            match = _SPEC.match(part)
            if not match:
                logging.getLogger("odoo.tests.tag_selector").error("Invalid tag %s", part)
                continue
            sign, tag, module, klass, method = match.groups()
            if not tag and sign != "-":
                tag = "standard"
            elif not tag or tag == "*":
                tag = None
            (self.exclude if sign == "-" else self.include).add((tag, module, klass, method))
        if self.exclude and not self.include:
            self.include.add(("standard", None, None, None))

    def check(self, test):
        tags = test.test_tags | {test.test_module}

        def matching(spec):
            tag, module, klass, method = spec
            return not ((tag and tag not in tags) or (module and module != test.test_module)
                        or (klass and klass != type(test).__name__)
                        or (method and method != test._testMethodName))

        return not any(map(matching, self.exclude)) and any(map(matching, self.include))


def tagged(*tags):
    """Odoo's decorator: `-tag` removes a tag (`@tagged('post_install', '-at_install')`)."""
    def decorate(cls):
        given = set(cls.__dict__.get("test_tags", cls.test_tags))
        cls.test_tags = frozenset(
            {t for t in tags if not t.startswith("-")} | given - {t[1:] for t in tags
                                                              if t.startswith("-")})
        return cls
    return decorate


class TransactionCase(unittest.TestCase):
    """Odoo's, on the stand-in's env: one connection a class, a savepoint a test."""

    test_tags = DEFAULT_TAGS
    db = None  # the Database, set by run()

    @property
    def test_module(self):
        return type(self).__module__.split(".")[2]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        conn = cls.db.connect()
        cls.addClassCleanup(conn.close)
        cls.cr = Cursor(conn, cls.db.s["db_name"])
        cls.env = Environment(cls.cr, SUPERUSER_ID, {})

    def setUp(self):
        super().setUp()
        self.cr.execute("SAVEPOINT test")
        self.addCleanup(self.cr.execute, "ROLLBACK TO SAVEPOINT test")


def install_odoo(addons_path):
    """`odoo`, `odoo.tests`, `odoo.tests.common` and `odoo.addons` (a package over
    addons_path) as add-ons' tests import them."""
    odoo = odoo_module()
    odoo.__path__ = []
    tests = types.ModuleType("odoo.tests")
    tests.TransactionCase, tests.tagged, tests.common = TransactionCase, tagged, tests
    addons = types.ModuleType("odoo.addons")
    addons.__path__ = list(addons_path)
    odoo.tests, odoo.addons = tests, addons
    sys.modules.update({"odoo": odoo, "odoo.tests": tests, "odoo.tests.common": tests,
                        "odoo.addons": addons})


def test_modules(module):
    """The module's `tests` package's `test_*` submodules, as Odoo finds them."""
    try:
        package = importlib.import_module(f"odoo.addons.{module}.tests")
    except ImportError as exc:
        if exc.name in (f"odoo.addons.{module}", f"odoo.addons.{module}.tests"):
            return []
        raise
    return [m for name, m in inspect.getmembers(package, inspect.ismodule)
            if name.startswith("test_")]


def make_suite(modules, position, selector):
    where = TagsSelector(position)
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for module in modules:
        for test_module in test_modules(module):
            for test in loader.loadTestsFromModule(test_module):
                for case in _cases(test):
                    if where.check(case) and selector.check(case):
                        suite.addTest(case)
    return suite


def _cases(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _cases(test)
        elif isinstance(test, TransactionCase):
            yield test


class Result(unittest.TestResult):
    """Odoo's OdooTestResult: each line on the logger of the test's module."""

    def _log(self, level, test, msg, *args):
        logging.getLogger(type(test).__module__).log(level, msg, *args)

    @staticmethod
    def describe(test):
        return f"{type(test).__qualname__}.{test._testMethodName}"

    def startTest(self, test):
        super().startTest(test)
        self._log(logging.INFO, test, "Starting %s ...", self.describe(test))

    def _error(self, flavour, test, err):
        self._log(logging.INFO, test, "=" * 70)
        self._log(logging.ERROR, test, "%s: %s\n%s", flavour, self.describe(test),
                  self._exc_info_to_string(err, test))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._error("FAIL", test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._error("ERROR", test, err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._log(logging.INFO, test, "skipped %s : %s", self.describe(test), reason)


def _suite(report, modules, position, selector, broken):
    """The modules' tests at that position; a module whose tests do not import is
    counted as an error once (`broken`) and left out (Odoo stops loading there; a
    build must fail either way)."""
    suite = unittest.TestSuite()
    for module in modules:
        if module in broken:
            continue
        try:
            suite.addTests(make_suite([module], position, selector))
        except Exception:
            broken.add(module)
            logging.getLogger("odoo.modules.module").exception(
                "Can not `import` the tests of %s.", module)
            report.errors.append((unittest.suite._ErrorHolder(f"{module}.tests"),
                                  "the tests do not import"))
    return suite


def run(db, loaded, tags):
    """`loaded`: the modules to test, in dependency order. Returns True when all passed."""
    install_odoo(db.s["addons_path"])
    TransactionCase.db = db
    selector, report, broken = TagsSelector(tags), Result(), set()
    for module in loaded:
        started = time.monotonic()
        before = (report.testsRun, len(report.failures), len(report.errors))
        _suite(report, [module], "at_install", selector, broken).run(report)
        spent = time.monotonic() - started
        log.info("Module %s loaded in %.2fs (incl. %.2fs test), 0 queries", module, spent, spent)
        tests, failed, errors = (report.testsRun - before[0], len(report.failures) - before[1],
                                 len(report.errors) - before[2])
        if failed or errors:
            log.error("Module %s: %d failures, %d errors of %d tests", module, failed, errors,
                      tests)
    log.info("Modules loaded.")
    started = time.monotonic()
    logging.getLogger("odoo.service.server").info("Starting post tests")
    before = report.testsRun
    _suite(report, loaded, "post_install", selector, broken).run(report)
    logging.getLogger("odoo.service.server").info(
        "%d post-tests in %.2fs, 0 queries", report.testsRun - before, time.monotonic() - started)
    failed, errors = len(report.failures), len(report.errors)
    summary = logging.getLogger("odoo.tests.result")
    if failed or errors:
        summary.error("%d failed, %d error(s) of %d tests when loading database %r", failed,
                      errors, report.testsRun, db.s["db_name"])
    elif not report.testsRun:
        summary.warning("0 failed, 0 error(s) of 0 tests when loading database %r",
                        db.s["db_name"])
    else:
        summary.info("0 failed, 0 error(s) of %d tests when loading database %r",
                     report.testsRun, db.s["db_name"])
    return not (failed or errors)
