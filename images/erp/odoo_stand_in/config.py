"""The server's settings as Odoo reads them: the command line, then the config file's
[options], then the entrypoint's environment, then Odoo's defaults."""

import argparse
import configparser
import logging
import os
import sys

VERSION = os.environ.get("ODOO_VERSION", "17.0")
DB_WAIT_SECONDS = 30
DEFAULTS = {"db_host": None, "db_port": "5432", "db_user": None, "db_password": None,
            "db_name": "odoo", "addons_path": "", "data_dir": "/var/lib/odoo",
            "http_port": "8069", "http_interface": "", "proxy_mode": "False",
            "workers": "0", "gevent_port": "8072", "smtp_server": "localhost",
            "smtp_port": "25", "smtp_user": None, "smtp_password": None, "smtp_ssl": "False",
            "max_cron_threads": "2"}
LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(dbname)s %(name)s: %(message)s"
log = logging.getLogger("odoo.service.server")


class _Database(logging.Filter):
    """Odoo's log lines name the database being worked on, `?` before there is one."""

    name = "?"

    def filter(self, record):
        record.dbname = self.name
        return True


IN_LOG = _Database()


def start_logging(stream):
    logging.basicConfig(stream=stream, level=logging.INFO, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(IN_LOG)


class ConfigError(Exception):
    pass


def fail(message):
    print(f"odoo: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def read_config(path):
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from exc
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot parse the configuration file {path}: {exc}") from exc
    if not parser.has_section("options"):
        raise ConfigError(f"the configuration file {path} has no [options] section")
    return dict(parser.items("options"))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="odoo", add_help=True)
    p.add_argument("-c", "--config")
    p.add_argument("--db_host")
    p.add_argument("--db_port")
    p.add_argument("-r", "--db_user")
    p.add_argument("-w", "--db_password")
    p.add_argument("-d", "--database", dest="db_name")
    p.add_argument("--addons-path", dest="addons_path")
    p.add_argument("-D", "--data-dir", dest="data_dir")
    p.add_argument("-p", "--http-port", dest="http_port")
    p.add_argument("--http-interface", dest="http_interface")
    p.add_argument("--proxy-mode", dest="proxy_mode", action="store_const", const="True")
    p.add_argument("-i", "--init", default="")
    p.add_argument("-u", "--update", default="")
    p.add_argument("--stop-after-init", action="store_true")
    p.add_argument("--max-cron-threads", dest="max_cron_threads")
    p.add_argument("--test-enable", action="store_true")
    p.add_argument("--test-tags")
    p.add_argument("--smtp", dest="smtp_server")
    p.add_argument("--smtp-port", dest="smtp_port")
    p.add_argument("--smtp-user", dest="smtp_user")
    p.add_argument("--smtp-password", dest="smtp_password")
    p.add_argument("--smtp-ssl", dest="smtp_ssl", action="store_const", const="True")
    p.add_argument("--shell-interface", dest="shell_interface")
    return p.parse_known_args(argv)


def settings(args, env_defaults):
    """Command line, then config file, then the entrypoint's environment, then defaults."""
    path = args.config or os.environ.get("ODOO_RC")
    config = read_config(path) if path else {}
    for old, new in (("xmlrpc_port", "http_port"), ("xmlrpc_interface", "http_interface")):
        if old in config:  # the names before Odoo 11
            config.setdefault(new, config[old])
    merged = {}
    for key, default in DEFAULTS.items():
        value = getattr(args, key, None)
        if value is None:
            value = config.get(key, env_defaults.get(key, default))
        merged[key] = None if value is None or value.strip() in ("False", "None") else value.strip()
    try:
        merged["db_port"] = int(merged["db_port"] or 5432)
        merged["http_port"] = int(merged["http_port"] or 8069)
        merged["gevent_port"] = int(merged["gevent_port"] or 8072)
        merged["workers"] = int(merged["workers"] or 0)
        merged["smtp_port"] = int(merged["smtp_port"] or 25)
        merged["max_cron_threads"] = int(merged["max_cron_threads"] or 0)
    except ValueError as exc:
        raise ConfigError(f"{path or 'options'}: a port is not a number ({exc})") from exc
    given = args.db_name or config.get("db_name") or env_defaults.get("db_name") or ""
    merged["db_name_set"] = given.strip() not in ("", "False", "None")  # Odoo's default: none
    merged["db_name"] = (merged["db_name"] or "odoo").split(",")[0].strip()
    merged["proxy_mode"] = (merged["proxy_mode"] or "").lower() in ("true", "1", "yes")
    merged["smtp_ssl"] = (merged["smtp_ssl"] or "").lower() in ("true", "1", "yes")
    merged["addons_path"] = [p.strip() for p in (merged["addons_path"] or "").split(",") if p.strip()]
    merged["data_dir"] = merged["data_dir"] or DEFAULTS["data_dir"]
    merged["config_file"] = path
    return merged


def checked_settings(args, env_defaults):
    """`settings`, or exit 1 with the reason (every command's start)."""
    try:
        return settings(args, env_defaults)
    except ConfigError as exc:
        fail(str(exc))


def module_list(text):
    return [m.strip() for m in text.split(",") if m.strip()]


def report_configuration(s, unknown):
    log.info("Odoo version %s (berth test stand-in)", VERSION)
    log.info("Using configuration file at %s", s["config_file"] or "(none)")
    log.info("addons paths: %s", s["addons_path"])
    log.info("database: %s@%s:%s/%s", s["db_user"] or "default", s["db_host"] or "default",
             s["db_port"], s["db_name"] or "(none)")
    if unknown:
        log.warning("options without effect in the stand-in: %s", " ".join(unknown))
