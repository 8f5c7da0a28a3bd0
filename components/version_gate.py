"""HeadscaleVersionGate: `pulumi preview`/`up` refuse to lower the Headscale version.

Headscale migrates its database one way when it starts, so an older Headscale must not start on a database a
newer one has already migrated. The pod refuses that too (the ``pre-upgrade`` init container, see
``components/upgrade.py``), but only once the rollout has begun; this gate stops it in the program: the
provider's ``check`` fails on ``version`` when it is lower (numerically, X.Y.Z) than the version this resource
last recorded. Raising the version, keeping it, or the first deployment pass.

A deliberate downgrade, after restoring the database from the snapshot taken before the upgrade (docs/upgrades.md),
sets ``allow_downgrade_from`` to the version being left: exactly that downgrade passes.

The provider is self-contained (standard library and the Pulumi SDK only, no state of its own, no network): the
engine pickles it with dill into the resource's state and runs it in another process.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

__all__ = [
    "GATE_ID",
    "README_SECTION",
    "HeadscaleVersionGate",
    "VersionGateProvider",
    "downgrade_message",
    "parse_version",
]

README_SECTION = "docs/upgrades.md"
#: The id every gate carries: one gate per Headscale, the version lives in its outputs.
GATE_ID = "headscale-version"
#: What the engine passes for a value not known yet: the SDK's pulumi.runtime.rpc.UNKNOWN, copied so the pickled
#: provider stays small (tests/tools/test_pulumi_internals.py checks the copy against the pinned SDK).
ENGINE_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# X.Y.Z as the pre-upgrade script accepts it: no leading zeros, at most 9 digits per part.
_PART = r"(0|[1-9][0-9]{0,8})"
_VERSION = re.compile(rf"{_PART}\.{_PART}\.{_PART}")


def parse_version(value: object) -> tuple[int, int, int] | None:
    """``"0.29.2"`` → ``(0, 29, 2)``; None when ``value`` is not X.Y.Z."""
    match = _VERSION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def downgrade_message(current: str, requested: str) -> str:
    """Why lowering ``current`` to ``requested`` is refused, and the way back."""
    return (
        f"downgrade refused: headscale.version {requested} is older than {current}, the version this stack last "
        f"deployed. Headscale's database migrations are one-way: {current} may already have migrated the database, "
        f"and {requested} cannot run on it (its pod refuses to start too). Keep {current}, or go back deliberately "
        f"as {README_SECTION} describes: restore the snapshot taken before the upgrade, "
        f"pre-upgrade/{requested}-{current}/headscale.sqlite in Headscale's backup directory, then allow exactly "
        f"this downgrade with allowDowngradeFrom={current}"
    )


class VersionGateProvider(ResourceProvider):
    """check refuses a lower version; create/update record it; delete forgets it. No side effects."""

    serialize_as_secret_always = False  # nothing secret is captured

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        version = news.get("version")
        if version == ENGINE_UNKNOWN:
            return CheckResult(news, [])  # a preview with the version not known yet: checked again at `up`
        requested = parse_version(version)
        if requested is None:
            reason = f"version: {version!r} is not a Headscale version X.Y.Z (for example '0.29.2')"
            return CheckResult(news, [CheckFailure("version", reason)])
        allowed = news.get("allowDowngradeFrom")
        if allowed not in (None, "", ENGINE_UNKNOWN) and parse_version(allowed) is None:
            reason = f"allowDowngradeFrom: {allowed!r} is not a Headscale version X.Y.Z (or empty)"
            return CheckResult(news, [CheckFailure("allowDowngradeFrom", reason)])
        current = olds.get("version")
        recorded = parse_version(current)
        if recorded is not None and requested < recorded and allowed != current:
            return CheckResult(news, [CheckFailure("version", downgrade_message(str(current), str(version)))])
        return CheckResult(news, [])

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [
            key for key in ("version", "allowDowngradeFrom") if (olds.get(key) or None) != (news.get(key) or None)
        ]
        return DiffResult(changes=bool(changed), replaces=[], stables=[], delete_before_replace=False)

    @staticmethod
    def _outputs(news: dict[str, Any], previous: str | None) -> dict[str, Any]:
        return {"version": news["version"], "previous": previous, "allowDowngradeFrom": news.get("allowDowngradeFrom")}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(GATE_ID, self._outputs(props, None))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        old = olds.get("version")
        previous = old if old != news["version"] else olds.get("previous")
        return UpdateResult(self._outputs(news, previous))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        return None


class HeadscaleVersionGate(Resource, module="upgrade", name="VersionGate"):
    """Records the Headscale version a stack deploys; a lower one fails `pulumi preview` and `pulumi up`.

    Make the Headscale workload depend on it, so a refused downgrade changes nothing in the cluster. Outputs:
    ``version`` (recorded) and ``previous`` (the version before the last change, None at first).
    """

    version: pulumi.Output[str]
    previous: pulumi.Output[str | None]

    def __init__(
        self,
        name: str,
        version: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
        *,
        allow_downgrade_from: pulumi.Input[str] | None = None,
    ) -> None:
        props = {"version": version, "allowDowngradeFrom": allow_downgrade_from, "previous": None}
        super().__init__(VersionGateProvider(), name, props, opts)
