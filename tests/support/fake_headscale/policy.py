"""The policy as Headscale reads it (database or file mode) and the ``/api/v1/policy`` operations."""

from __future__ import annotations

from typing import Any

from headscale_ha.policy.check import validate_policy
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.schema import policy_document
from tests.support.fake_headscale.gateway import Call
from tests.support.fake_headscale.store import Store
from tests.support.fake_headscale.wire import invalid_argument, optional_timestamp, unknown_error

_POLICY_KEYS_028 = frozenset({"groups", "hosts", "tagOwners", "acls", "ssh", "autoApprovers"})
_POLICY_KEYS_029 = _POLICY_KEYS_028 | {"grants", "nodeAttrs", "tests", "sshTests", "randomizeClientPort"}


def _fold_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def parse_policy(text: str, *, minor: str) -> dict[str, Any] | None:
    """Parse and validate policy text as release ``minor`` does (None = empty policy, allow all); ValueError, the
    caller picks the gRPC code. Validation is the project's policy model, which decides what Headscale's
    parser decides (tests/policy/test_conformance.py), including a ``tests`` entry proven to fail."""
    if not text.strip():
        return None
    try:
        document = load_hujson(text)
    except PolicyError as exc:
        raise ValueError(f"parsing policy: {exc.problems[0].reason}") from None
    if not isinstance(document, dict):
        raise ValueError("parsing policy: the policy must be a JSON object")
    allowed = _POLICY_KEYS_029 if minor >= "0.29" else _POLICY_KEYS_028
    folded = {_fold_key(key) for key in allowed}  # Go's v2 decoder: any case, '_' and '-' ignored
    unknown = sorted(key for key in document if _fold_key(key) not in folded)
    if unknown:
        raise ValueError(f'parsing policy: unknown field "{unknown[0]}"')
    try:
        return policy_document(validate_policy(document, version=minor))
    except PolicyError as exc:
        raise ValueError(f"parsing policy: {exc.problems[0]}") from None


def defined_tags(policy_text: str | None, *, minor: str) -> set[str]:
    """The tags the stored policy's ``tagOwners`` define (none while the policy is absent or invalid)."""
    try:
        document = parse_policy(policy_text or "", minor=minor)
    except ValueError:
        return set()
    owners = (document or {}).get("tagOwners") or {}
    return set(owners) if isinstance(owners, dict) else set()


class PolicyOperations(Store):
    """Read, set (database mode only) and check (0.29) the policy."""

    def _op_get_policy(self, call: Call) -> dict[str, Any]:
        if self.policy_mode == "file":
            if self.policy_text is None:
                path = "/etc/headscale/acl.hujson"
                raise unknown_error(f'reading policy from path "{path}": open {path}: no such file or directory')
            return {"policy": self.policy_text, "updatedAt": None}
        if self.policy_text is None:
            raise unknown_error("loading ACL from database: acl policy not found")
        return {"policy": self.policy_text, "updatedAt": optional_timestamp(self.policy_updated_at)}

    def _op_set_policy(self, call: Call) -> dict[str, Any]:
        if self.policy_mode != "database":
            raise unknown_error("update is disabled for modes other than 'database'")
        text = call.body["policy"]
        try:
            parse_policy(text, minor=self.minor)
        except ValueError as exc:
            raise unknown_error(f"setting policy: {exc}") from None
        self.policy_text, self.policy_updated_at = text, self.now
        return {"policy": text, "updatedAt": optional_timestamp(self.policy_updated_at)}

    def _op_check_policy(self, call: Call) -> dict[str, Any]:
        try:
            parse_policy(call.body["policy"], minor=self.minor)
        except ValueError as exc:
            raise invalid_argument(str(exc)) from None
        return {}
