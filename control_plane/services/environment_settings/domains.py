"""Custom domains of environments: added, proved by DNS, removed.

A name is added `pending` with a token. Its owner proves control of it by
publishing either a TXT record `_berth-challenge.<name>` holding
`berth-verify=<token>`, or a CNAME from the name to the environment's platform
host; `verify` asks the resolver of the `DNS_RESOLVER` setting (the system's
when unset) and only then marks it `verified`. The environment's `url` is its
oldest verified domain (kept on the environment's row, so that lists read no
other table), else its platform subdomain.

A pending claim holds nothing: environments of several organizations may claim
the same name, and the first whose DNS proof passes gets it (the others'
pending claims are dropped then; a unique index on verified names settles two
proofs at once). Within one organization a name is one environment's. An
answer never tells that another organization holds a name, except to a caller
whose DNS proof has just passed (decisions.md, "Custom domains"). Pending
claims go after PENDING_DAYS (services/housekeeping.py). Names that no public
certificate authority would sign (reserved and special-use names, IP literals,
single labels) and names under the platform's own apps domain are refused."""

import datetime as dt
import ipaddress
import re
import secrets

import idna
from peewee import IntegrityError

from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.models import CustomDomain, Environment, Project
from control_plane.services import audit
from control_plane.services.environment_settings import routes
from control_plane.services.environment_settings.dns_check import Resolver
from control_plane.services.environment_settings.routes import platform_host
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import (
    DomainInUse,
    DomainLimitReached,
    DomainNotVerified,
    InvalidDomain,
    NotFound,
)

DOMAIN = states.DomainStatus
PER_ENVIRONMENT = 20
PENDING_DAYS = 7  # a claim not verified by then is deleted
CHALLENGE_LABEL = "_berth-challenge"
TXT_PREFIX = "berth-verify="
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_TLD = re.compile(r"^([a-z]{2,63}|xn--[a-z0-9-]{1,59})$")
# Special-use names (RFC 2606, 6761, 6762, 7686, 8375, 9476) and the private-use
# TLDs no public CA issues for.
RESERVED_TLDS = frozenset({"test", "example", "invalid", "localhost", "local", "onion",
                           "alt", "arpa", "internal", "home", "lan", "corp", "intranet"})
RESERVED_DOMAINS = ("example.com", "example.net", "example.org")


def normalize(raw, apps_domain):
    """The name in lower-case IDNA form, or InvalidDomain saying why not."""
    text = raw.rstrip(".").lower() if isinstance(raw, str) else ""
    if not text or any(c.isspace() for c in text):
        raise InvalidDomain("A domain is a host name such as erp.example.co.uk.")
    try:
        name = idna.encode(text, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise InvalidDomain(f"Not a valid host name: {exc}.") from None
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise InvalidDomain("Not a valid host name: letters, digits and hyphens in dot-separated "
                            "labels of 1 to 63 characters, 253 in all.")
    if _is_ip(name):
        raise InvalidDomain("An IP address is not a domain.")
    if len(labels) < 2 or not _TLD.match(labels[-1]):
        raise InvalidDomain("A domain needs a public top-level domain (such as .com).")
    if labels[-1] in RESERVED_TLDS or any(
            name == d or name.endswith("." + d) for d in RESERVED_DOMAINS):
        raise InvalidDomain(f"{name} is a reserved name that no certificate authority signs.")
    apps = apps_domain.lower().strip(".")
    if name == apps or name.endswith("." + apps):
        raise InvalidDomain(f"Names under {apps} are the platform's own.")
    return name


def _is_ip(name):
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


# --- changes ------------------------------------------------------------------

def add(env, raw_name, apps_domain):
    """A pending claim of the name for `env`. Refused (409) only when this
    organization already has the name; another organization's claim, pending or
    verified, is neither an obstacle nor told."""
    name = normalize(raw_name, apps_domain)
    with database.atomic():
        if CustomDomain.select().where(CustomDomain.environment == env.id).count() \
                >= PER_ENVIRONMENT:
            raise DomainLimitReached(f"An environment has at most {PER_ENVIRONMENT} domains.")
        held = _claims(name, env).where(CustomDomain.environment.in_(_org_envs(env))).first()
        if held is not None:
            raise _in_use_here(name, env, held.environment_id)
        states.check("domain", None, DOMAIN.PENDING)
        try:
            with database.atomic():  # a savepoint: a concurrent add to this environment
                domain = CustomDomain.create(environment=env.id, name=name,
                                             token=secrets.token_hex(16), status=DOMAIN.PENDING)
        except IntegrityError:
            raise _in_use_here(name, env, env.id) from None
        audit.record(env.project.organization_id, "domain.add", "environment", env.id,
                     {"domain": name})
        return domain


def _claims(name, env):
    """Other environments' claims of `name`."""
    return CustomDomain.select().where(CustomDomain.name == name,
                                       CustomDomain.environment != env.id)


def _org_envs(env):
    """The ids of the environments of `env`'s organization (a subquery)."""
    org = Project.select(Project.organization).where(Project.id == env.project_id)
    return (Environment.select(Environment.id).join(Project)
            .where(Project.organization.in_(org)))


def _in_use_here(name, env, holder_id):
    if holder_id == env.id:
        return DomainInUse(f"{name} is already this environment's domain.")
    return DomainInUse(f"{name} is already the domain of environment {holder_id} "
                       "of this organization; remove it there first.")


def verify(env, raw_name, berth):
    """Mark the domain verified if DNS shows its record (and tell the server's
    proxy to route it); otherwise record what was found and raise
    DomainNotVerified (the record is kept: the check is retried)."""
    settings, apps_domain = berth.settings, berth.settings["APPS_DOMAIN"]
    domain = _get(env, raw_name, apps_domain)
    if domain.status == DOMAIN.VERIFIED:
        return domain
    found, error = Resolver.from_settings(settings).proof(domain.name, challenge_name(domain.name),
                                  TXT_PREFIX + domain.token, platform_host(env, apps_domain))
    now = clock.now()
    with database.atomic():
        if found:
            _take(domain, env, now)
            audit.record(env.project.organization_id, "domain.verify", "environment", env.id,
                         {"domain": domain.name})
            routes.changed(env, berth)
            return CustomDomain.get_by_id(domain.id)
        CustomDomain.update(checked_at=now, check_error=error).where(
            CustomDomain.id == domain.id).execute()
    raise DomainNotVerified(f"DNS does not show that {domain.name} is yours yet: {error}",
                            details=instructions(domain, env, apps_domain))


def _take(domain, env, now):
    """The name becomes `env`'s (its DNS proof passed), unless it is verified
    elsewhere already: the first proof wins and keeps it. Other pending claims
    of the name are dropped."""
    # Every claim of the name locked, in one order: concurrent proofs take turns
    # (each would otherwise wait on the other's rows: a deadlock on PostgreSQL).
    claims = [i for (i,) in for_update(CustomDomain.select(CustomDomain.id).where(
        CustomDomain.name == domain.name).order_by(CustomDomain.id)).tuples()]
    if domain.id not in claims:  # dropped by a proof that came first
        raise NotFound("This environment has no such domain.")
    if _claims(domain.name, env).where(CustomDomain.status == DOMAIN.VERIFIED).exists():
        raise _verified_elsewhere(domain.name, env)
    states.check("domain", domain.status, DOMAIN.VERIFIED)
    try:
        with database.atomic():  # a savepoint: a concurrent proof of the name loses here
            CustomDomain.update(status=DOMAIN.VERIFIED, verified_at=now, checked_at=now,
                                check_error=None).where(CustomDomain.id == domain.id).execute()
    except IntegrityError:
        raise _verified_elsewhere(domain.name, env) from None
    CustomDomain.delete().where(CustomDomain.name == domain.name,
                                CustomDomain.status == DOMAIN.PENDING,
                                CustomDomain.id != domain.id).execute()
    _refresh_url(env.id)


def _verified_elsewhere(name, env):
    """Told only to a caller whose DNS proof of the name has just passed: within
    its organization, which environment has it; else only that it is taken."""
    ours = _claims(name, env).where(CustomDomain.status == DOMAIN.VERIFIED,
                                    CustomDomain.environment.in_(_org_envs(env))).first()
    if ours is not None:
        return _in_use_here(name, env, ours.environment_id)
    return DomainInUse(f"DNS shows {name} is yours, but it is already verified for another "
                       "environment on this platform; it must be removed there first "
                       "(support can help).")


def remove(env, raw_name, berth):
    domain = _get(env, raw_name, berth.settings["APPS_DOMAIN"])
    with database.atomic():
        CustomDomain.delete().where(CustomDomain.id == domain.id).execute()
        audit.record(env.project.organization_id, "domain.remove", "environment", env.id,
                     {"domain": domain.name})
        _refresh_url(env.id)
        if domain.status == DOMAIN.VERIFIED:
            routes.changed(env, berth)


def prune_pending(now, batch):
    """Deletes claims still pending PENDING_DAYS after they were added (a
    housekeeping turn); returns how many went. They hold nothing, but an
    environment's 20 places and its list are the user's to see cleared."""
    ids = [i for (i,) in CustomDomain.select(CustomDomain.id).where(
        CustomDomain.status == DOMAIN.PENDING,
        CustomDomain.created_at < now - dt.timedelta(days=PENDING_DAYS)).limit(batch).tuples()]
    if ids:
        CustomDomain.delete().where(CustomDomain.id.in_(ids)).execute()
    return len(ids)


def _refresh_url(env_id):
    """The environment's `url` domain: its oldest verified one, if any."""
    first = (CustomDomain.select(CustomDomain.name)
             .where(CustomDomain.environment == env_id, CustomDomain.status == DOMAIN.VERIFIED)
             .order_by(CustomDomain.verified_at, CustomDomain.name).first())
    Environment.update(custom_domain=first and first.name, custom_domain_verified=bool(first),
                       updated_at=clock.now()).where(Environment.id == env_id).execute()


# --- reading ------------------------------------------------------------------

def challenge_name(name):
    return f"{CHALLENGE_LABEL}.{name}"


def instructions(domain, env, apps_domain):
    """The two records either of which proves control of the name."""
    return {"txt": {"name": challenge_name(domain.name), "value": TXT_PREFIX + domain.token},
            "cname": {"name": domain.name, "target": platform_host(env, apps_domain)}}


def describe(domain, env, apps_domain):
    return {"domain": domain.name, "environment_id": env.id, "status": domain.status,
            "verification": instructions(domain, env, apps_domain),
            "created_at": domain.created_at, "verified_at": domain.verified_at,
            "checked_at": domain.checked_at, "check_error": domain.check_error}


def list_of(env):
    return list(CustomDomain.select().where(CustomDomain.environment == env.id)
                .order_by(CustomDomain.created_at, CustomDomain.name))


def _get(env, raw_name, apps_domain):
    try:
        name = normalize(raw_name, apps_domain)
    except InvalidDomain:
        name = None
    domain = name and CustomDomain.get_or_none(CustomDomain.environment == env.id,
                                               CustomDomain.name == name)
    if domain is None:
        raise NotFound("This environment has no such domain.")
    return domain


