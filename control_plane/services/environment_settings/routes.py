"""What each server's proxy (agent/proxy/) needs from the control plane: its
settings, and the host names each environment answers at, its platform
subdomain and its verified custom domains. Every environment command carries
them; a change of names alone (a domain verified or removed) is a `routes`
command of its own, so the agent routes the new names without a redeploy."""

from pathlib import Path

from control_plane.models import CustomDomain
from control_plane.services.tasks import engine, queue
from control_plane.vocabulary import states
from protocol.kinds import CommandKind

E = states.EnvironmentStatus
# Environments whose containers exist, so their routes do (or will again).
ROUTED = (E.RUNNING, E.STOPPED, E.ERROR, E.DEPLOYING)


def platform_host(env, apps_domain):
    return f"{env.id.hex[:12]}.{apps_domain}"


def hostnames(env, apps_domain):
    verified = [d.name for d in CustomDomain.select(CustomDomain.name).where(
        CustomDomain.environment == env.id, CustomDomain.status == states.DomainStatus.VERIFIED)
        .order_by(CustomDomain.name)]
    return [platform_host(env, apps_domain), *verified]


def proxy_settings(settings):
    """None when no proxy runs (PROXY_IMAGE empty)."""
    if not settings.get("PROXY_IMAGE"):
        return None
    roots = settings.get("ACME_CA_ROOTS")
    return {"image": settings["PROXY_IMAGE"], "acme_directory": settings["ACME_DIRECTORY_URL"],
            "acme_email": settings.get("ACME_EMAIL") or None,
            "acme_roots_pem": Path(roots).read_text() if roots else None}


def fields(env, settings):
    """The proxy fields of an environment's command (none without a proxy)."""
    proxy = proxy_settings(settings)
    if proxy is None:
        return {}
    return {"proxy": proxy, "hostnames": hostnames(env, settings["APPS_DOMAIN"])}


def changed(env, berth):
    """(Inside the caller's transaction.) The environment's names changed: its
    server's proxy is told, if it has routes there, woken once it commits."""
    extra = fields(env, berth.settings)
    if not extra or env.server_id is None or not env.is_active or env.status not in ROUTED:
        return None
    command = queue.enqueue(env.server_id, CommandKind.ROUTES,
                            {"environment_id": str(env.id), **extra})
    engine.wake(berth, env.server_id)
    return command
