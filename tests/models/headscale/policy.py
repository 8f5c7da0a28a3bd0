"""The policy as Headscale reads it (database or file mode) and the ``/api/v1/policy`` operations."""

from __future__ import annotations

from typing import Any

from headscale_ha.policy.check import validate_policy
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.problems import PolicyError, PolicyProblem, format_path
from headscale_ha.policy.schema import policy_document
from tests.models.headscale.gateway import Call
from tests.models.headscale.hujson import hujson_error
from tests.models.headscale.policy_errors import headscale_policy_error
from tests.models.headscale.store import Store
from tests.models.headscale.wire import invalid_argument, optional_timestamp, unknown_error

_POLICY_KEYS_028 = frozenset({"groups", "hosts", "tagOwners", "acls", "ssh", "autoApprovers"})
_POLICY_KEYS_029 = _POLICY_KEYS_028 | {"grants", "nodeAttrs", "tests", "sshTests", "randomizeClientPort"}


def _fold_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def parse_policy(text: str, *, minor: str) -> dict[str, Any] | None:
    """Parse and validate policy text as release ``minor`` does (None = empty policy, allow all); ValueError with
    that release's message, the caller picks the gRPC code. Only an empty text is "no policy": white space alone
    is not HuJSON. Validation is the project's policy model, which decides what Headscale's parser decides
    (tests/policy/test_conformance.py), including a ``tests`` entry proven to fail; the wording is Headscale's
    (:mod:`.policy_errors`)."""
    if not text:
        return None
    syntax = hujson_error(text)
    if syntax is not None:
        raise ValueError(f"parsing policy: parsing HuJSON: {syntax}")
    try:
        document = load_hujson(text)
    except PolicyError as exc:
        raise ValueError(f"parsing policy: {exc.problems[0].reason}") from None  # HuJSON Go's decoder refuses
    if not isinstance(document, dict):
        raise ValueError("parsing policy: the policy must be a JSON object")
    allowed = _POLICY_KEYS_029 if minor >= "0.29" else _POLICY_KEYS_028
    folded = {_fold_key(key) for key in allowed}  # Go's v2 decoder: any case, '_' and '-' ignored
    problems = [
        PolicyProblem(format_path([key]), f"unknown key {key!r}") for key in document if _fold_key(key) not in folded
    ]
    validated: dict[str, Any] | None = None
    try:
        validated = policy_document(validate_policy(document, version=minor))
    except PolicyError as exc:
        unknown = {problem.path for problem in problems}
        problems += [problem for problem in exc.problems if problem.path not in unknown]
    if problems:
        raise ValueError(f"parsing policy: {headscale_policy_error(document, problems, minor=minor)}")
    return validated


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
