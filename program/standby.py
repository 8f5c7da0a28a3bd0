"""A standby checks the active it follows, through the active stack's outputs.

A standby is only useful if it can take the active's place: at promotion it restores (SQLite) or promotes
(PostgreSQL) the active's database and serves it with the tailnet's identity. So it must run the very Headscale
release that wrote that database, be in a database stage that really follows the active's, and hold the same
Noise key and backup key epoch (the backup key is derived from both: another epoch refuses every signed replica).
Each site stack exports what is compared here (``CHECKED_OUTPUTS``); a standby reads them from the active site's
stack and refuses to deploy when any differs, naming every difference with both values.

Headscale versions must be equal, not merely share a minor: Headscale applies its database migrations when it
starts and they only run forward, and patch releases have changed migrations too (0.24.1 and 0.24.3 fixed
migration errors). A standby on another release would, at promotion, either run a binary older than the schema it
restores or migrate the registry forward so that a failback to the old active's release no longer reads it. The
release lives in Pulumi.yaml, shared by every stack, so the two only differ when a stack file overrides it or
when an upgrade has been deployed to one stack and not yet to the other (upgrade the active first).

The check is a gate, not a late failure: the standby's own values come from its config (and the identity stack's
plain fingerprint) before anything of it is registered, and the stack's Kubernetes provider depends on the
check's Output. A mismatch rejects that Output, so the provider's registration fails and with it every resource
that waits for the provider; `pulumi preview` and `pulumi up` (``--skip-preview`` too) stop before any step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from headscale_ha.components.headscale import IdentityFromStack, IdentitySource, ImportedIdentity
from headscale_ha.components.identity import identity_fingerprint
from headscale_ha.components.settings import PROJECT, DatabaseStage
from headscale_ha.program.args import identity_source
from headscale_ha.program.config import StackConfig

#: The outputs every site stack exports, and which a standby requires of its active.
HEADSCALE_VERSION = "headscaleVersion"
DATABASE_STAGE = "databaseStage"
IDENTITY_FINGERPRINT = "identityFingerprint"
BACKUP_KEY_EPOCH = "backupKeyEpoch"
CHECKED_OUTPUTS = (HEADSCALE_VERSION, DATABASE_STAGE, IDENTITY_FINGERPRINT, BACKUP_KEY_EPOCH)


class StandbyMismatch(pulumi.RunError):
    """The standby disagrees with the active it follows; the message lists every difference."""

    def __init__(self, active_stack: str, mismatches: list[str]) -> None:
        self.active_stack = active_stack
        self.mismatches = list(mismatches)
        super().__init__(
            f"{PROJECT}: this standby cannot take over from the active stack {active_stack} "
            f"({len(self.mismatches)} mismatch{'es' if len(self.mismatches) != 1 else ''}):\n  "
            + "\n  ".join(self.mismatches)
        )


def _stage_problem(own: str, active: str) -> str | None:
    """Why a standby in stage ``own`` cannot follow an active in stage ``active``, or None when it can."""
    if own == active:
        return None
    if active == DatabaseStage.MIGRATING and own == DatabaseStage.SQLITE:
        # The active's Litestream replica is frozen as the rollback point while the Job runs: still a good source.
        return None
    if active == DatabaseStage.POSTGRES and own == DatabaseStage.SQLITE:
        return (
            "a SQLite standby of a PostgreSQL active would restore the active's Litestream replica, frozen since "
            "its migration; move this stack to database.stage postgres (a CNPG replica cluster of the active)"
        )
    if own == DatabaseStage.POSTGRES and active == DatabaseStage.MIGRATING:
        return (
            "the active is still migrating, so its PostgreSQL database is not the registry yet; keep this stack at "
            "database.stage sqlite until the active reaches postgres"
        )
    if own == DatabaseStage.POSTGRES and active == DatabaseStage.SQLITE:
        return (
            "a PostgreSQL standby has nothing to replicate from an active that runs SQLite; keep this stack at "
            "database.stage sqlite until the active has migrated"
        )
    return "the stages are incompatible"


def compare(own: Mapping[str, Any], active: Mapping[str, Any]) -> list[str]:
    """Every way this standby (``own``) disagrees with its active (``active``), one line each, both values named.

    Both mappings hold ``CHECKED_OUTPUTS``. Empty when the standby can take over.
    """
    mismatches = []
    own_version, active_version = own[HEADSCALE_VERSION], active[HEADSCALE_VERSION]
    if own_version != active_version:
        mismatches.append(
            f"{HEADSCALE_VERSION}: this standby runs {own_version}, the active runs {active_version}; a standby runs "
            "the active's exact release (Headscale migrates its database at start, one way only): deploy the same "
            "headscale.version to both (upgrade the active first)"
        )
    own_stage, active_stage = own[DATABASE_STAGE], active[DATABASE_STAGE]
    problem = _stage_problem(str(own_stage), str(active_stage))
    if problem is not None:
        mismatches.append(
            f"{DATABASE_STAGE}: this standby is in stage {own_stage}, the active in stage {active_stage}: {problem}"
        )
    own_print, active_print = own[IDENTITY_FINGERPRINT], active[IDENTITY_FINGERPRINT]
    if own_print != active_print:
        mismatches.append(
            f"{IDENTITY_FINGERPRINT}: this standby's Noise key has fingerprint {own_print}, the active's "
            f"{active_print}; a standby serving another key is another server to every client: take the identity "
            "from the same identity stack (tailnet.identityStack) or import the same keys on both"
        )
    own_epoch, active_epoch = _whole(own[BACKUP_KEY_EPOCH]), _whole(active[BACKUP_KEY_EPOCH])
    if own_epoch != active_epoch:
        mismatches.append(
            f"{BACKUP_KEY_EPOCH}: this standby derives its backup key with backup.auth.keyEpoch {own_epoch}, the "
            f"active with {active_epoch}; at promotion its restore would refuse every replica the active signed "
            "(exit 41): set one keyEpoch in Pulumi.yaml for every stack, not in a stack file"
        )
    return mismatches


def _whole(value: Any) -> Any:
    """A number read through a StackReference is a protobuf double (``1.0``): a whole one is shown as the integer
    the active's config wrote."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check(active_stack: str, own: Mapping[str, Any], active: Mapping[str, Any]) -> dict[str, Any]:
    """What the standby verified (the active's stack and the agreed values, which are its own, with their own
    types); raises StandbyMismatch otherwise."""
    mismatches = compare(own, active)
    if mismatches:
        raise StandbyMismatch(active_stack, mismatches)
    return {"stack": active_stack, **{key: _whole(active[key]) for key in CHECKED_OUTPUTS}}


@dataclass(frozen=True)
class StandbyGate:
    """The check as the program uses it: what the Kubernetes provider waits for, and the stack's ``follows``."""

    #: The active stack's StackReference once the check passed; rejected with StandbyMismatch otherwise. As a
    #: ``depends_on`` of the provider it fails the provider's registration, and with it every resource that waits
    #: for the provider or for a component that does (all of the site's but the reads): nothing is touched.
    opens: pulumi.Output[pulumi.Resource]
    #: What the standby verified: the active's stack and the agreed values (the ``follows`` output).
    follows: pulumi.Output[dict[str, Any]]


def follow_active(
    name: str,
    *,
    active_stack: str,
    own: Mapping[str, pulumi.Input[Any]],
    opts: pulumi.ResourceOptions | None = None,
) -> StandbyGate:
    """Reference the active site's stack and check it against ``own`` (this stack's ``CHECKED_OUTPUTS``).

    ``own`` must not depend on this stack's resources: the gate is awaited before any of them is registered. A
    missing output of the active stack fails the run as ``require_output`` does.
    """
    reference = pulumi.StackReference(f"{name}-active", stack_name=active_stack, opts=opts)
    theirs = {key: reference.require_output(key) for key in CHECKED_OUTPUTS}
    follows = pulumi.Output.all(pulumi.Output.all(**own), pulumi.Output.all(**theirs)).apply(
        lambda both: check(active_stack, both[0], both[1])
    )
    return StandbyGate(opens=follows.apply(lambda _: reference), follows=follows)


@dataclass(frozen=True, kw_only=True)
class StandbyGateArgs:
    """What a standby checks of its active, from its own config: the active's stack, and this stack's own values."""

    active_stack: str  # the active site's fully qualified stack
    headscale_version: str
    database_stage: str
    identity: IdentitySource  # where this site's Noise key comes from (its fingerprint is compared)
    backup_key_epoch: int


def standby_gate_args(config: StackConfig) -> StandbyGateArgs:
    """The gate of a standby stack, from its config alone: its own release and stage, and its identity."""
    tailnet = config.tailnet
    return StandbyGateArgs(
        active_stack=tailnet.stack_of(tailnet.site(tailnet.active_site)),
        headscale_version=config.headscale.version,
        database_stage=config.database.stage.value,
        identity=identity_source(config),
        backup_key_epoch=config.backup.auth.key_epoch,
    )


def own_fingerprint(name: str, identity: IdentitySource, opts: pulumi.ResourceOptions) -> pulumi.Input[str]:
    """The fingerprint of the Noise key this site will serve with, known without any resource of the stack.

    From the same source HeadscaleServer takes its keys from (``identity_source``): the identity stack's plain
    ``fingerprint`` output, read here a second time under a name of its own (HeadscaleServer's read is created
    after the provider, too late for the gate); or the key imported on this stack, hashed as the server does.
    """
    if isinstance(identity, IdentityFromStack):
        read = pulumi.StackReference(f"{name}-standby-check-identity", stack_name=identity.stack_name, opts=opts)
        return read.require_output("fingerprint")
    if isinstance(identity, ImportedIdentity) and isinstance(identity.noise_private_key, str):
        return identity_fingerprint(identity.noise_private_key)
    # Not reached: identity_source gives a site either imported keys or the identity stack.
    raise TypeError(f"a site's identity is imported keys or the identity stack, not {type(identity).__name__}")


def standby_gate(name: str, args: StandbyGateArgs, opts: pulumi.ResourceOptions) -> StandbyGate:
    """The gate of a standby: its own values against its active stack's outputs."""
    own: dict[str, pulumi.Input[Any]] = {
        HEADSCALE_VERSION: args.headscale_version,
        DATABASE_STAGE: args.database_stage,
        IDENTITY_FINGERPRINT: own_fingerprint(name, args.identity, opts),
        BACKUP_KEY_EPOCH: args.backup_key_epoch,
    }
    return follow_active(name, active_stack=args.active_stack, own=own, opts=opts)
