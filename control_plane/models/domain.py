"""Custom domains of environments (services/environment_settings/domains.py)."""

import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.environment import Environment
from control_plane.vocabulary.states import DomainStatus


class CustomDomain(BaseModel):
    """A host name an environment answers at once DNS shows that its owner
    controls it. Several environments (of different organizations) may claim a
    name while it is pending; once verified it is unique (a partial index): one
    name, one environment. The token is what its TXT record must hold (not a
    secret: it only proves who can publish DNS records for the name)."""

    environment = peewee.ForeignKeyField(Environment, backref="domains", on_delete="CASCADE")
    name = peewee.CharField(max_length=253, index=True)  # lower case, IDNA (xn--) form
    token = peewee.CharField(max_length=64)
    status = peewee.CharField(max_length=16, default=DomainStatus.PENDING)
    verified_at = DateTimeField(null=True)
    checked_at = DateTimeField(null=True)
    check_error = peewee.TextField(null=True)  # what the last failed check found

    class Meta:
        indexes = ((("environment", "name"), True),)


CustomDomain.add_index(CustomDomain.index(
    CustomDomain.name, unique=True, name="customdomain_verified_name",
    where=CustomDomain.status == DomainStatus.VERIFIED))
