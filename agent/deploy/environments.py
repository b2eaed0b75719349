"""Environments on this server: deploy, start, stop, restart, destroy.

Everything an environment owns carries the label berth.environment_id (the
agent never touches objects without it): a network `berth-<id>`, a PostgreSQL
container with its data volume, and the ERP container, which mounts the
environment directory (add-ons, filestore, configuration). The images follow
the official odoo and postgres images' conventions."""

import contextlib
import os
import secrets
import shutil
import time
import urllib.request
from pathlib import Path

from agent.deploy import archiving as archiving_setup
from agent.deploy import checkout, db_ready, requirements, updates
from agent.deploy.checkout import (  # noqa: F401 - where the agent's other modules find them
    ADDON_REPOS,
    CONTAINER_ADDONS,
    PREVIOUS_ADDONS,
    addon_repo_names,
    addons_path,
)
from agent.deploy.git import DeployError
from agent.deploy.values import option_lines, postgres_arguments, variables
from agent.errors import ContainerNotFound, EngineError, ImageNotFound, engine_errors
from agent.mail import HOST_NAME as MAIL_HOST
from protocol import wal

ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
SETTINGS_LABEL = "berth.postgres_settings"  # the settings the database container runs with
DEFAULT_ROOT = "/srv/berth"
ERP_UID = 101  # the `odoo` user of the official image; the spec may say otherwise
# What was deployed before, kept aside during a deploy until it stands (settle) or
# fails (put_back): the code (checkout.PREVIOUS_ADDONS), the configuration and the
# stopped ERP container.
PREVIOUS_CONF, PREVIOUS_ERP = "odoo.conf.previous", "-previous"
HEALTH_POLL = 0.1  # seconds between health checks: a restore or deploy waits on the first success
CRASH_LOOK, CRASHES = 1.0, 2  # seconds between looks at the ERP's state; restarts that fail it


def _fail_if_crashing(erp):
    """DeployError when the ERP has exited and been restarted (its restart
    policy) more than CRASHES times: it will not answer, whatever the wait."""
    with engine_errors():
        erp.reload()
        state = erp.attrs.get("State") or {}
        if (state.get("Running") and not state.get("Restarting")) or \
                erp.attrs.get("RestartCount", 0) < CRASHES:
            return
        words = erp.logs(tail=3).decode(errors="replace").strip().splitlines()
    last = words[-1].strip() if words else "no output"
    raise DeployError(f"the ERP exits as it starts (exit code {state.get('ExitCode')}, "
                      f"restarted {erp.attrs.get('RestartCount')} times): {last}")


def env_root():
    return Path(os.environ.get("BERTH_AGENT_ENV_ROOT", DEFAULT_ROOT))


class Environments:
    def __init__(self, docker_client, root=None, health_timeout=120):
        self.docker = docker_client
        self.root = Path(root) if root else env_root()
        self.health_timeout = health_timeout

    # --- names --------------------------------------------------------------

    def _names(self, env_id):
        short = env_id.replace("-", "")[:12]
        return {"network": f"berth-{short}", "volume": f"berth-{short}-db",
                "db": f"berth-{short}-db", "erp": f"berth-{short}-erp",
                "dir": self.root / env_id}

    def _labels(self, env_id, role=None):
        labels = {ENV_LABEL: env_id}
        if role:
            labels[ROLE_LABEL] = role
        return labels

    def _container(self, name):
        """The container of that name, or None."""
        try:
            with engine_errors():
                return self.docker.containers.get(name)
        except ContainerNotFound:
            return None

    # --- deploy ---------------------------------------------------------------

    def deploy(self, spec, log, stopped=None, keep_previous=False):
        """The environment at the spec's code and settings, answering its health check.
        With `keep_previous`, what was deployed before stays aside: the caller settles
        the deploy once it stands (`settle`) or puts the previous one back (`unwind`).
        `stopped()`: called when a module update has stopped the previous ERP."""
        env_id = spec["environment_id"]
        n = self._names(env_id)
        if spec.get("unreadable_variables"):
            raise DeployError("the control plane could not read the secret variable(s) "
                              f"{', '.join(spec['unreadable_variables'])} (its secret key "
                              "changed): set them again")
        # Checked before anything is touched: a refused value leaves the server as it was.
        option_lines(spec.get("erp_options"))
        postgres_arguments(spec.get("postgres_settings"))
        variables(spec.get("variables"))
        with engine_errors():
            uid = int(spec.get("erp_uid", ERP_UID))
            for path in ("addons", "filestore", "logs"):
                (n["dir"] / path).mkdir(parents=True, exist_ok=True)
            for path in ("filestore", "logs"):  # the ERP writes there as its own user
                os.chown(n["dir"] / path, uid, uid)
            password = self._db_password(n["dir"])
            self._network(env_id, n, log)
            db = self._postgres(env_id, n, spec, password, log)
            self._wait_db(db, log)
            _keep_conf(n["dir"])
            code = checkout.project(spec.get("git"), n["dir"] / "addons", log)
            addon_commits = checkout.addon_repositories(spec.get("addon_repositories"),
                                                        n["dir"] / "addons", log)
            self._config(n, spec, password, log)
            dirs = self._addon_dirs(n, spec)
            run = {**spec, "erp_image": self._with_requirements(env_id, n, spec, dirs, log)}
            update, install = updates.plan(db, dirs, log, spec.get("install_modules") or ())
            previous = self._aside(n, log, stop_log="for the module update" if update or install
                                   else "to start the new one")
            if update or install:
                erp, address = self._updated(env_id, n, run, update, install, previous, log,
                                             stopped)
            else:
                erp, address = self._started(env_id, n, run, previous, log)
        if not keep_previous:
            self.settle(env_id)
        log("info", f"environment is up at {address} on its network")
        return {"erp_container": erp.id, "db_container": db.id, "erp_address": address,
                "git_commit": None, **code, "image_tag": spec["erp_image"],
                "addon_commits": addon_commits, "updated_modules": [*update, *install]}

    def _addon_dirs(self, n, spec):
        """The add-ons path's directories, on this server."""
        names = addon_repo_names(spec.get("addon_repositories"))
        addons = n["dir"] / "addons"
        return [addons, *(addons / ADDON_REPOS / name for name in names)]

    def _aside(self, n, log, stop_log):
        """The running ERP stopped and renamed `<name>-previous` (a stale one left by
        an agent stopped mid-deploy removed first): the previous ERP, or None."""
        previous, kept = self._container(n["erp"]), n["erp"] + PREVIOUS_ERP
        with engine_errors():
            stale = self._container(kept)
            if stale is not None:
                stale.remove(force=True)
            if previous is not None:
                if previous.status == "running":
                    previous.stop(timeout=20)
                    log("info", f"stopped {previous.name} {stop_log}")
                previous.rename(kept)
        return previous

    def _started(self, env_id, n, spec, previous, log):
        """The new ERP, no module to update; if it does not serve, the previous one
        comes back (its database untouched by the deploy)."""
        try:
            erp = self._erp(env_id, n, spec, log)
            return erp, self._wait_http(erp, log)
        except DeployError as exc:
            if previous is None or not spec.get("auto_revert", True):
                self.settle(env_id)
                raise
            raise self.unwind(env_id, spec, f"the new ERP did not serve: {exc}", log,
                              database_changed=False) from exc

    def _updated(self, env_id, n, spec, update, install, previous, log, stopped=None):
        """The module update (agent/deploy/updates.py) with the previous ERP stopped
        and kept aside, then the new ERP; if the update fails, or the new ERP after
        it, the deploy unwinds (its database goes back afterwards, from the
        pre-deploy backup, agent/deploy/commands.py) and UpdateFailed is raised."""
        try:
            if stopped is not None:
                stopped()
            self._image(spec["erp_image"], log)
            updates.run(self, env_id, spec["erp_image"], erp_volumes(n),
                        variables(spec.get("variables")), update, install, log)
            erp = self._erp(env_id, n, spec, log)
            try:
                address = self._wait_http(erp, log)
            except DeployError as exc:
                raise updates.UpdateFailed(f"the ERP failed after the module update: {exc}") \
                    from exc
        except Exception as exc:
            failure = exc if isinstance(exc, updates.UpdateFailed) else \
                updates.UpdateFailed(f"the module update did not finish: {exc}")
            raise self.unwind(env_id, spec, str(failure), log) from exc
        return erp, address

    def unwind(self, env_id, spec, why, log, database_changed=True, checks=None):
        """A deploy that does not stand: the previous code, configuration and
        (stopped) ERP container put back; or, without a previous deploy or with the
        environment's automatic revert off, the environment left as the deploy left
        it (`kept_as_is` says why). Returns the UpdateFailed to raise."""
        n = self._names(env_id)
        if self._container(n["erp"] + PREVIOUS_ERP) is None:
            kept_as_is = "there is no previous deploy to go back to"
        elif not spec.get("auto_revert", True):
            kept_as_is = "automatic revert is off"
        else:
            self.put_back(env_id, log)
            return updates.UpdateFailed(why, database_changed=database_changed, checks=checks)
        self.settle(env_id)
        log("warning", f"{kept_as_is}: the environment is left as the deploy left it")
        return updates.UpdateFailed(why, kept_as_is=kept_as_is,
                                    database_changed=database_changed, checks=checks)

    def settle(self, env_id):
        """The deploy stands: what was kept aside of the previous one is removed."""
        n = self._names(env_id)
        previous = self._container(n["erp"] + PREVIOUS_ERP)
        with contextlib.suppress(EngineError), engine_errors():
            if previous is not None:
                previous.remove(force=True)
        _discard_tree(n["dir"] / PREVIOUS_ADDONS)
        (n["dir"] / PREVIOUS_CONF).unlink(missing_ok=True)

    def put_back(self, env_id, log):
        """The previous add-ons, configuration and (stopped) ERP container back."""
        n = self._names(env_id)
        new, previous = self._container(n["erp"]), self._container(n["erp"] + PREVIOUS_ERP)
        with engine_errors():
            if new is not None:
                new.remove(force=True)
            if previous is not None:
                previous.rename(n["erp"])
        self._previous_files(n)
        log("warning", "the previous add-ons, configuration and ERP container are back")

    def _previous_files(self, n):
        addons, old = n["dir"] / "addons", n["dir"] / PREVIOUS_ADDONS
        if old.exists():
            _discard_tree(addons)
            old.rename(addons)
        conf = n["dir"] / PREVIOUS_CONF
        if conf.exists():
            (n["dir"] / "odoo.conf").write_text(conf.read_text())
            conf.unlink()

    def _with_requirements(self, env_id, n, spec, dirs, log):
        """The ERP image with the add-ons' requirements (agent/deploy/requirements.py);
        if they cannot be installed, the previous add-ons and configuration are put
        back (the running ERP was never stopped) and RequirementsFailed is raised."""
        self._image(spec["erp_image"], log)
        try:
            return requirements.image(self, env_id, n, spec["erp_image"], dirs, log)
        except requirements.RequirementsFailed:
            self._previous_files(n)
            raise

    def start_erp(self, env_id, log):
        """The ERP started and healthy (after a restore, a deploy's revert)."""
        n = self._names(env_id)
        with engine_errors():
            erp = self._container(n["erp"])
            if erp is None:
                raise DeployError("the environment has no ERP container")
            erp.start()
        log("info", f"started {erp.name}; waiting for its health check")
        self._wait_http(erp, log)

    def _db_password(self, env_dir):
        """Generated here on the first deploy, never sent anywhere (mode 0600)."""
        path = env_dir / "db.secret"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24))
        return path.read_text().strip()

    def _network(self, env_id, n, log):
        if not self.docker.networks.list(names=[n["network"]]):
            self.docker.networks.create(n["network"], labels=self._labels(env_id))
            log("info", f"created network {n['network']}")

    def _postgres(self, env_id, n, spec, password, log):
        """The database container, made again (its volume kept) when its settings
        change: PostgreSQL reads them at start, from its command line."""
        settings = postgres_arguments(spec.get("postgres_settings"))
        volumes = {n["volume"]: {"bind": "/var/lib/postgresql/data", "mode": "rw"}}
        archiving = archiving_setup.configure(n["dir"], spec.get("wal_archiving"))
        if archiving:  # in the label too: turning it on or off makes the container again
            settings += [a for k, v in wal.settings(archiving["archive_timeout"])
                         for a in ("-c", f"{k}={v}")]
            volumes[str(n["dir"] / archiving_setup.SPOOL_DIR)] = {"bind": wal.SPOOL, "mode": "rw"}
        db = self._container(n["db"])
        if db is not None and db.labels.get(SETTINGS_LABEL, "") != " ".join(settings):
            db.stop(timeout=30)
            db.remove()
            db = None
            log("info", "the database settings changed: recreating the database container "
                        "(its data is kept)")
        if db is not None and db.status != "running":
            db.start()
            log("info", "started the database container")
        if db is None:
            if not self.docker.volumes.list(filters={"name": n["volume"]}):
                self.docker.volumes.create(n["volume"], labels=self._labels(env_id, "postgres"))
            self._image(spec["postgres_image"], log)
            db = self.docker.containers.run(
                spec["postgres_image"], name=n["db"], detach=True, network=n["network"],
                labels={**self._labels(env_id, "postgres"), SETTINGS_LABEL: " ".join(settings)},
                restart_policy={"Name": "unless-stopped"}, command=["postgres", *settings],
                environment={"POSTGRES_USER": "odoo", "POSTGRES_PASSWORD": password,
                             "POSTGRES_DB": "odoo"},
                volumes=volumes)
            db.reload()
            log("info", f"started PostgreSQL ({spec['postgres_image']})")
        return db

    def _wait_db(self, db, log, timeout=60):
        if not db_ready.wait_ready(db, timeout):
            raise DeployError(f"the database did not become ready within {timeout} s")
        log("info", "the database accepts connections")

    def _config(self, n, spec, password, log):
        # The database container's name resolves on the environment's own network.
        lines = ["[options]", f"db_host = {n['db']}", "db_port = 5432", "db_user = odoo",
                 f"db_password = {password}", "db_name = odoo",
                 f"addons_path = {addons_path(spec)}", "data_dir = /var/lib/odoo",
                 "proxy_mode = True"]
        lines += [f"{k} = {v}" for k, v in option_lines(spec.get("erp_options"))]
        if mail := spec.get("mail"):  # Odoo sends through these when no mail server is set
            lines += [f"smtp_server = {mail['host']}", f"smtp_port = {mail['port']}",
                      f"smtp_user = {mail['user']}", f"smtp_password = {mail['password']}",
                      "smtp_ssl = False"]
        path = n["dir"] / "odoo.conf"
        path.write_text("\n".join(lines) + "\n")
        os.chmod(path, 0o644)  # the ERP runs as its own user inside the container
        log("info", "wrote the ERP configuration")

    def _image(self, name, log):
        """The image is on the server, pulled if need be; else a reason a person reads."""
        try:
            with engine_errors():
                self.docker.images.get(name)
            return
        except ImageNotFound:
            pass
        log("info", f"pulling {name}")
        try:
            with engine_errors():
                self.docker.images.pull(name)
        except EngineError as exc:
            raise DeployError(f"the image {name} is not on this server and could not be "
                              f"pulled: {exc.detail}") from exc

    def _discard(self, name, log):
        """A container the engine created but could not start holds the name:
        remove it, so that a failed deploy leaves no half-made ERP."""
        leftover = self._container(name)
        if leftover is not None:
            with contextlib.suppress(EngineError):  # a retry removes it anyway
                with engine_errors():
                    leftover.remove(force=True)
                log("info", "removed the ERP container that could not start")

    def _erp(self, env_id, n, spec, log):
        old = self._container(n["erp"])
        if old is not None:
            old.remove(force=True)
            log("info", "removed the previous ERP container")
        resources = {}
        if spec.get("cpu_cores"):
            resources["nano_cpus"] = int(float(spec["cpu_cores"]) * 1e9)
        if spec.get("ram_mb"):
            resources["mem_limit"] = f"{int(spec['ram_mb'])}m"
        self._image(spec["erp_image"], log)
        try:
            with engine_errors():
                erp = self.docker.containers.run(
                    spec["erp_image"], name=n["erp"], detach=True, network=n["network"],
                    labels=self._labels(env_id, "erp"), restart_policy={"Name": "unless-stopped"},
                    environment=variables(spec.get("variables")), volumes=erp_volumes(n),
                    # The mail catcher's address on this server (agent/mail/catcher.py).
                    extra_hosts={MAIL_HOST: "host-gateway"} if spec.get("mail") else None,
                    **resources)
        except EngineError:
            self._discard(n["erp"], log)
            raise
        log("info", f"started the ERP ({spec['erp_image']})")
        return erp

    def _wait_http(self, erp, log):
        """The ERP's address on its network once it answers its health check there
        (it publishes no port: the proxy reaches it there too). An ERP that keeps
        exiting fails it at once, with its last words, rather than at the timeout."""
        deadline = time.monotonic() + self.health_timeout
        address, looked = None, time.monotonic()
        while time.monotonic() < deadline:
            try:
                address = address or erp_address(self.docker, erp.name)
                with urllib.request.urlopen(f"http://{address}/web/health", timeout=5) as r:
                    if r.status == 200:
                        log("info", "the ERP answers its health check")
                        return address
            except (OSError, DeployError):  # not listening yet, or (re)starting: no address
                pass
            if time.monotonic() - looked >= CRASH_LOOK:
                looked = time.monotonic()
                _fail_if_crashing(erp)
            time.sleep(HEALTH_POLL)
        raise DeployError(f"the ERP did not answer http://{address or erp.name}/web/health "
                          f"within {self.health_timeout} s")

    # --- lifecycle --------------------------------------------------------------

    def _all(self, env_id):
        # One removed between the engine's list and its inspect (a drill's copy, a
        # destroy) is left out, not an error.
        return self.docker.containers.list(all=True, filters={"label": f"{ENV_LABEL}={env_id}"},
                                           ignore_removed=True)

    def stop(self, env_id, log):
        with engine_errors():
            for c in self._all(env_id):
                c.stop(timeout=20)
                log("info", f"stopped {c.name}")
        return {"stopped": True}

    def start(self, env_id, log):
        with engine_errors():
            # The database first, then the ERP that needs it; never an ERP kept aside
            # by a deploy that has not settled.
            for c in sorted(self._all(env_id), key=lambda c: c.labels.get(ROLE_LABEL) != "postgres"):
                if c.name.endswith(PREVIOUS_ERP):
                    continue
                c.start()
                log("info", f"started {c.name}")
        return {"started": True}

    def restart(self, env_id, log):
        self.stop(env_id, log)
        return self.start(env_id, log)

    def destroy(self, env_id, delete_data, log):
        """Containers, database volume, network, images and configuration always;
        the environment directory (add-ons, filestore, logs) with delete_data."""
        n = self._names(env_id)
        with engine_errors():
            containers = self._all(env_id)
            for c in containers:
                c.remove(force=True, v=True)
                log("info", f"removed {c.name}")
            volumes = self.docker.volumes.list(filters={"label": f"{ENV_LABEL}={env_id}"})
            for v in volumes:
                v.remove(force=True)
                log("info", f"removed volume {v.name}")
            for net in self.docker.networks.list(filters={"label": f"{ENV_LABEL}={env_id}"}):
                net.remove()
                log("info", f"removed network {net.name}")
            # its images with the add-ons' requirements (agent/deploy/requirements.py)
            for image in self.docker.images.list(filters={"label": f"{ENV_LABEL}={env_id}"}):
                self.docker.images.remove(image.id, force=True)
                log("info", f"removed image {', '.join(image.tags) or image.short_id}")
        for name in ("odoo.conf", "db.secret"):
            (n["dir"] / name).unlink(missing_ok=True)
        # Its database is gone: nothing more of its WAL is shipped.
        archiving_setup.configure(n["dir"], None)
        _discard_tree(n["dir"] / archiving_setup.SPOOL_DIR)
        if delete_data:
            shutil.rmtree(n["dir"], ignore_errors=True)
            log("info", "removed the environment directory")
        return {"deleted_containers": len(containers), "deleted_database": bool(volumes),
                "deleted_data": bool(delete_data)}


def erp_address(docker_client, name, port=8069):
    """`ip:port` of a running ERP container on its environment's network."""
    container = docker_client.containers.get(name)
    networks = container.attrs["NetworkSettings"]["Networks"] or {}
    ip = next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), None)
    if not ip:
        raise DeployError(f"the ERP container {name} has no address on its network")
    return f"{ip}:{port}"


def _discard_tree(path):
    shutil.rmtree(path, ignore_errors=True)


def _keep_conf(env_dir):
    """The configuration deployed until now, kept aside (owner-only: it holds the
    database password) until the deploy stands."""
    kept = env_dir / PREVIOUS_CONF
    kept.unlink(missing_ok=True)
    conf = env_dir / "odoo.conf"
    if conf.exists():
        fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(conf.read_text())


def erp_volumes(n):
    """The ERP's mounts (its one-off commands, module updates, have the same)."""
    d = n["dir"]
    return {str(d / "odoo.conf"): {"bind": "/etc/odoo/odoo.conf", "mode": "ro"},
            str(d / "addons"): {"bind": CONTAINER_ADDONS, "mode": "ro"},
            str(d / "filestore"): {"bind": "/var/lib/odoo", "mode": "rw"},
            str(d / "logs"): {"bind": "/var/log/odoo", "mode": "rw"}}
