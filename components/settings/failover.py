"""Automatic failover behind a witness lease (docs/witness-lease.md): the timing every site shares, validated as the
lease script (components/scripts/witness-lease.sh) validates it, so that a stack the program accepts never deploys a
renewer that refuses to start.

Off by default: a site is promoted by hand (docs/failover.md). It lives in ``tailnet`` (Pulumi.yaml) because every
site must run the same timing and the same failsafe: a holder with the failsafe beside a gate without it is two
writers the first time the holder loses only the witness.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from headscale_ha.components.config_types import DnsLabel
from headscale_ha.components.settings.base import FieldProblem, SettingsModel, raise_problems

#: What a fenced renewer stops in a serving pod, in order (the lease script's STOP): Headscale first, so that
#: nothing it acknowledges after the fence is lost, then Litestream (SIGTERM ships what it has not), then the
#: backup signer. Their stops share the margin the timing leaves.
FENCED_WRITERS = ("headscale", "litestream", "sign.sh")


class FailoverSettings(SettingsModel):
    """Who serves is who holds a Lease on a third API server (the witness); every site shares these values."""

    automatic: bool = Field(
        default=False,
        description="Promote without a human: every site runs Headscale behind a gate, and the site holding the "
        "witness Lease serves (docs/witness-lease.md; needs `witnessKubeconfig`, with the failsafe "
        "`peerKubeconfigs`, and SQLite). Off: a site is promoted by hand (docs/failover.md).",
    )
    witness_namespace: DnsLabel = Field(
        default="headscale-ha", description="Namespace of the Lease on the witness API server."
    )
    lease: DnsLabel = Field(default="headscale", description="Name of the Lease on the witness API server.")
    lease_seconds: int = Field(
        default=20, ge=5, le=600, description="Seconds a holder's renewal is good for (the Lease's duration)."
    )
    skew_seconds: int = Field(
        default=2,
        ge=1,
        le=60,
        description="Bound on how far two sites' measurements of elapsed time may drift apart over one lease.",
    )
    renew_seconds: int = Field(default=3, ge=1, le=300, description="Seconds between a holder's renewals.")
    fence_after_seconds: int = Field(
        default=12,
        ge=2,
        le=600,
        description="A holder with no renewal accepted for this long stops serving; plus `skewSeconds` and the "
        "writers' stops it must end before `leaseSeconds`.",
    )
    stop_grace_seconds: int = Field(
        default=2, ge=1, le=60, description="Seconds each fenced writer gets after SIGTERM before SIGKILL."
    )
    ready_within_seconds: int = Field(
        default=900,
        ge=30,
        le=86400,
        description="A holder whose Headscale has not answered its readiness probe this many seconds after taking "
        "the Lease gives the Lease up to another site (a restore that keeps failing, a Headscale that cannot "
        "start); longer than a restore of the expected database takes.",
    )
    failsafe: bool = Field(
        default=True,
        description="A holder that loses the witness keeps serving while every other site's cluster vouches that "
        "it neither holds nor takes the Lease.",
    )

    @model_validator(mode="after")
    def _fenced_before_taken(self) -> FailoverSettings:
        raise_problems(self._timing_problems())
        return self

    def _timing_problems(self) -> list[FieldProblem]:
        """The lease script's rules, each reported at the field a user most likely set wrong."""
        problems = []
        if self.fence_after_seconds + self.skew_seconds >= self.lease_seconds:
            problems.append(
                FieldProblem(
                    ("fenceAfterSeconds",),
                    f"plus skewSeconds ({self.skew_seconds}) must be below leaseSeconds ({self.lease_seconds}): a "
                    "holder must stop before another site may take over",
                    self.fence_after_seconds,
                )
            )
        elif self.margin_seconds < self.stops_seconds:
            problems.append(
                FieldProblem(
                    ("stopGraceSeconds",),
                    f"times the {len(FENCED_WRITERS)} fenced writers ({', '.join(FENCED_WRITERS)}) must fit in "
                    f"leaseSeconds - skewSeconds - fenceAfterSeconds ({self.margin_seconds} s): the writers stop "
                    "before another site may take over",
                    self.stop_grace_seconds,
                )
            )
        if 2 * self.renew_seconds > self.fence_after_seconds:
            problems.append(
                FieldProblem(
                    ("renewSeconds",),
                    f"must be at most half of fenceAfterSeconds ({self.fence_after_seconds}): a holder gets two "
                    "tries before it fences",
                    self.renew_seconds,
                )
            )
        return problems

    @property
    def margin_seconds(self) -> int:
        """What the fencing deadline leaves before anyone may take over: the writers' stops must fit in it."""
        return self.lease_seconds - self.skew_seconds - self.fence_after_seconds

    @property
    def stops_seconds(self) -> int:
        """The longest the fence's stops can take: each writer's grace, in turn."""
        return len(FENCED_WRITERS) * self.stop_grace_seconds

    def script_environment(self) -> dict[str, str]:
        """The lease script's timing and STOP, as its environment (the same values in every site's pods)."""
        return {
            "LEASE_SECONDS": str(self.lease_seconds),
            "SKEW_SECONDS": str(self.skew_seconds),
            "RENEW_SECONDS": str(self.renew_seconds),
            "FENCE_AFTER_SECONDS": str(self.fence_after_seconds),
            "STOP": " ".join(FENCED_WRITERS),
            "STOP_GRACE_SECONDS": str(self.stop_grace_seconds),
        }
