"""States an agent reports, and the health the control plane reads from its
figures, named once for both sides."""

from enum import StrEnum


class CertificateState(StrEnum):
    """A routed name's certificate on a server's proxy."""
    PENDING = "pending"  # not asked for yet, or being issued
    VALID = "valid"
    FAILING = "failing"  # the last try failed; `reason` says why


class ServerHealth(StrEnum):
    """A server's status from its host metrics (the spec's thresholds)."""
    HEALTHY = "healthy"
    WARNING = "warning"
    CRITICAL = "critical"
