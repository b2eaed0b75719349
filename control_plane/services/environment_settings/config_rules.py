"""What an environment's configuration may hold: variables, the ERP options
written into the ERP's configuration file and the PostgreSQL settings given to
its server. Options and settings come from allow-lists, each with a type and a
range, never free text: a value ends up in a configuration file and on a
command line, and a wrong one must be refused here rather than found out when
the ERP or the database will not start.

Each check returns the value as the agent writes it (a string), or raises
ValueError with the reason a person reads."""

import re

# --- variables ----------------------------------------------------------------

VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_VARIABLES = 100
MAX_VALUE_CHARS = 32 * 1024
# Read by the ERP image's entry point (its database connection), by libpq (PG…:
# they would redirect the ERP's database connection) or set by the platform.
RESERVED_NAMES = frozenset({"HOST", "PORT", "USER", "PASSWORD", "ODOO_RC", "PATH", "HOME",
                            "LANG", "HOSTNAME", "PYTHONPATH"})
RESERVED_PREFIXES = ("PG", "BERTH_")
# A name is shown in every listing, task log and event: a credential pasted
# into the name field would be out in the open. Known token prefixes, AWS key
# ids, and long runs of mixed letters and digits are refused.
_CREDENTIAL_MARKS = ("svc_live_", "usr_live_", "srt_live_", "agt_live_", "sk_live_",
                     "pk_live_", "rk_live_", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb_",
                     "xoxp_")
_AWS_KEY_ID = re.compile(r"(AKIA|ASIA)[0-9A-Z]{16}")
_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def variable_name(name):
    if not isinstance(name, str) or not VARIABLE_NAME.fullmatch(name):
        raise ValueError("A variable name is a letter or underscore, then letters, digits and "
                         "underscores, at most 128 characters.")
    if name.upper() in RESERVED_NAMES or name.upper().startswith(RESERVED_PREFIXES):
        raise ValueError(f"{name} is reserved: the platform or the ERP's database connection "
                         "sets it.")
    lower = name.lower()
    if (any(mark in lower for mark in _CREDENTIAL_MARKS) or _AWS_KEY_ID.search(name)
            or any(re.search(r"\d", run) and re.search(r"[A-Za-z]", run)
                   for run in _RUN.findall(name))):
        raise ValueError("The name looks like it holds a credential; names are shown to every "
                         "reader. Put the secret in the value and mark it secret.")
    return name


def variable_value(value):
    if not isinstance(value, str):
        raise ValueError("A variable's value is a string.")
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"A variable's value is at most {MAX_VALUE_CHARS} characters.")
    if "\x00" in value:
        raise ValueError("A variable's value cannot hold a NUL character.")
    return value


# --- typed values ---------------------------------------------------------------

def _described(check, **schema):
    """The check with its OpenAPI schema, so the documents state what it accepts."""
    check.schema = schema
    return check


def integer(low, high):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"An integer from {low} to {high}.")
        return str(value)
    return _described(check, type="integer", minimum=low, maximum=high)


def number(low, high):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not low <= value <= high:
            raise ValueError(f"A number from {low} to {high}.")
        return repr(float(value))
    return _described(check, type="number", minimum=low, maximum=high)


def choice(*allowed):
    def check(value):
        if value not in allowed:
            raise ValueError(f"One of: {', '.join(allowed)}.")
        return value
    return _described(check, type="string", enum=list(allowed))


@lambda check: _described(check, type="boolean")
def boolean(value):
    if not isinstance(value, bool):
        raise ValueError("true or false.")
    return "True" if value else "False"


_SIZE = re.compile(r"([1-9][0-9]{0,12})(kB|MB|GB|TB)")
_UNIT_KB = {"kB": 1, "MB": 1024, "GB": 1024 ** 2, "TB": 1024 ** 3}


def size(low, high):
    """PostgreSQL's memory units, as a string: "64MB"."""
    def check(value):
        m = _SIZE.fullmatch(value) if isinstance(value, str) else None
        if m is None or not _kb(low) <= int(m[1]) * _UNIT_KB[m[2]] <= _kb(high):
            raise ValueError(f"A size such as \"64MB\" (units kB, MB, GB, TB) from {low} "
                             f"to {high}.")
        return value
    return _described(check, type="string", pattern=f"^{_SIZE.pattern}$",
                      description=f"From {low} to {high}")


def _kb(text):
    m = _SIZE.fullmatch(text)
    return int(m[1]) * _UNIT_KB[m[2]]


@lambda check: _described(check, type="string", minLength=1, maxLength=255,
                           description="A regular expression")
def dbfilter(value):
    """Odoo matches it as a regular expression against the database name."""
    if not isinstance(value, str) or not 1 <= len(value) <= 255 \
            or not value.isprintable():
        raise ValueError("A regular expression of 1 to 255 printable characters.")
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"Not a valid regular expression: {exc}.") from None
    return value


_MODULE = re.compile(r"[a-z0-9_]{1,64}")


@lambda check: _described(check, type="array", minItems=1, maxItems=32,
                           items={"type": "string", "pattern": f"^{_MODULE.pattern}$"})
def modules(value):
    if not isinstance(value, list) or not 1 <= len(value) <= 32 \
            or not all(isinstance(m, str) and _MODULE.fullmatch(m) for m in value):
        raise ValueError("A list of 1 to 32 module names (lower-case letters, digits, "
                         "underscores), such as [\"base\", \"web\"].")
    return ",".join(dict.fromkeys(value))


# --- the allow-lists --------------------------------------------------------------

MIB, GIB = 1024 ** 2, 1024 ** 3
DAY_MS = 86_400_000

ERP_OPTIONS = {
    "workers": integer(0, 64),
    "max_cron_threads": integer(0, 16),
    "limit_memory_soft": integer(64 * MIB, 64 * GIB),  # bytes
    "limit_memory_hard": integer(64 * MIB, 64 * GIB),
    "limit_time_cpu": integer(1, 86_400),  # seconds
    "limit_time_real": integer(1, 86_400),
    "limit_time_real_cron": integer(-1, 86_400),
    "limit_request": integer(1, 1_000_000),
    "log_level": choice("critical", "error", "warn", "info", "debug", "debug_rpc",
                        "debug_sql", "debug_rpc_answer"),
    "dbfilter": dbfilter,
    "server_wide_modules": modules,
    "list_db": boolean,
}

POSTGRES_SETTINGS = {
    "shared_buffers": size("128kB", "64GB"),
    "work_mem": size("64kB", "2GB"),
    "maintenance_work_mem": size("1MB", "16GB"),
    "effective_cache_size": size("8kB", "1TB"),
    "max_connections": integer(10, 1000),
    "statement_timeout": integer(0, DAY_MS),  # milliseconds
    "idle_in_transaction_session_timeout": integer(0, DAY_MS),
    "lock_timeout": integer(0, DAY_MS),
    "log_min_duration_statement": integer(-1, DAY_MS),
    "random_page_cost": number(0.1, 100),
    "effective_io_concurrency": integer(0, 1000),
}


def consistent_erp_options(rendered):
    """Checks across options: the hard memory limit is not below the soft one."""
    soft, hard = rendered.get("limit_memory_soft"), rendered.get("limit_memory_hard")
    if soft and hard and int(hard) < int(soft):
        return {"limit_memory_hard": ["Not below limit_memory_soft."]}
    return {}
