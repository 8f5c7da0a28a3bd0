"""The policy's schema: the pydantic models of a (normalised) document per Headscale minor, the field rules that
check each value with the readings of :mod:`.values`, and the translation of a pydantic error into
:class:`PolicyProblem` entries with their paths and "did you mean" hints.

A field rule needs the minor: the models are validated with ``context={"version": minor}`` (the entry points of
:mod:`.check` do this). It depends on :mod:`.values`, :mod:`.versions` and :mod:`.problems`; the rules across the
document (references, placement) are :mod:`.semantics`, above it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from headscale_ha.policy.problems import PolicyProblem, did_you_mean, format_path
from headscale_ha.policy.values import (
    AliasKind,
    check_protocol,
    could_be_user,
    parse_alias,
    parse_destination,
    parse_go_duration_ns,
    parse_grant_ip,
    parse_prefix,
    prometheus_duration_ok,
    protocol_takes_ports,
    tag_name_problem,
    validate_alias,
)
from headscale_ha.policy.versions import SUPPORTED_VERSIONS

__all__ = [
    "IP_POOL_REFUSAL",
    "Acl",
    "AutoApprovers",
    "Grant",
    "NodeAttr",
    "Policy",
    "PolicyTest",
    "SshPolicyTest",
    "SshRule",
    "policy_document",
    "validation_problems",
]


# ---------------------------------------------------------------------------------------------------------------
# Field rules (run on the normalised document; the version comes from the validation context)


def _version_of(info: ValidationInfo) -> str:
    context = info.context
    if not isinstance(context, dict) or context.get("version") not in SUPPORTED_VERSIONS:
        raise RuntimeError("validate a Policy with validate_policy(): the Headscale version is part of the rules")
    return context["version"]


def _rule(check: Callable[[str, str], object]) -> AfterValidator:
    """Turn a ``check(text, version)`` that raises ValueError into a validator whose message is the reason alone."""

    def validate(value: str, info: ValidationInfo) -> str:
        try:
            check(value, _version_of(info))
        except ValueError as exc:
            raise PydanticCustomError("headscale_policy", "{reason}", {"reason": str(exc)}) from None
        return value

    return AfterValidator(validate)


def _check_any_alias(text: str, version: str) -> None:
    parse_alias(text, version=version)


def _check_acl_dst(text: str, version: str) -> None:
    try:
        parse_destination(text, version=version)
    except ValueError as exc:
        try:
            alias = parse_alias(text, version=version)
        except ValueError:
            raise exc from None
        prefixed = alias.kind in (AliasKind.GROUP, AliasKind.TAG, AliasKind.AUTOGROUP)
        if text.count(":") > prefixed and alias.kind is not AliasKind.PREFIX:
            raise  # a port part was there and is wrong: its own error
        raise ValueError(f"destination {text!r} has no ports: write '{text}:*' or '{text}:<port>'") from None


def _check_ssh_src(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.kind not in (AliasKind.USER, AliasKind.GROUP, AliasKind.TAG, AliasKind.AUTOGROUP):
        hint = f"; users must contain '@': write '{text}@'" if alias.kind is AliasKind.HOST else ""
        raise ValueError(
            f"{text!r} ({alias.kind.value}) cannot be an SSH source (users, groups, tags, autogroups){hint}"
        )


def _check_ssh_dst(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.kind is AliasKind.WILDCARD:
        raise ValueError("'*' is not an SSH destination (since 0.28): use autogroup:member, autogroup:tagged or tags")
    if alias.kind not in (AliasKind.USER, AliasKind.TAG, AliasKind.AUTOGROUP, AliasKind.HOST):
        raise ValueError(
            f"{text!r} ({alias.kind.value}) cannot be used in an SSH destination (users, tags, autogroups)"
        )


def _check_principal(text: str, version: str) -> None:
    """Headscale's ``parseOwner`` / ``parseAutoApprover``: any '@' is a user, then group:, tag:."""
    if "@" in text or text.startswith(("group:", "tag:")):
        return
    hint = f"; users must contain '@': write '{text}@'" if could_be_user(text) else ""
    raise ValueError(f"{text!r} is not a user (with '@'), a group: or a tag:{hint}")


def _check_member(text: str, version: str) -> None:
    if version >= "0.29" and text.startswith("group:"):
        raise ValueError(f"groups cannot contain groups ({text!r}); list its users instead")
    if "@" not in text:
        if text.startswith("group:"):
            raise ValueError(f"groups cannot contain groups ({text!r}); list its users instead")
        raise ValueError(f"{text!r} is not a user: users must contain '@': write '{text}@'")


def _check_group_name(text: str, version: str) -> None:
    if not text.startswith("group:"):
        raise ValueError(f"group names start with 'group:' ({text!r})")


def _check_tag_name(text: str, version: str) -> None:
    if problem := tag_name_problem(text, version):
        raise ValueError(f"tagOwners keys are tags: {problem}")


def _check_host_name(text: str, version: str) -> None:
    if "@" in text or ":" in text:
        raise ValueError(f"{text!r} cannot be a host name (no '@' or ':')")


def _check_host_value(text: str, version: str) -> None:
    parse_prefix(text)


def _check_route(text: str, version: str) -> None:
    if "/" not in text:
        raise ValueError(f"routes are CIDRs: write '{text}/{parse_prefix(text)[0].prefixlen}'")
    parse_prefix(text)


def _check_acl_proto(text: str, version: str) -> None:
    check_protocol(text, version)


def _check_grant_ip(text: str, version: str) -> None:
    parse_grant_ip(text, version=version)


def _check_acl_action(text: str, version: str) -> None:
    if text != "accept":
        raise ValueError(f"ACL action {text!r}: the only action is 'accept' (written exactly so)")


def _check_ssh_action(text: str, version: str) -> None:
    if text == "" and version >= "0.29":
        return  # 0.29 reports an empty action as missing, with the rule
    if text not in ("accept", "check"):
        raise ValueError(f"SSH action {text!r}: use 'accept' or 'check'")


def _check_ssh_user(text: str, version: str) -> None:
    if version == "0.28":
        if text.startswith("autogroup:") and text != "autogroup:nonroot":
            raise ValueError(f"{text!r} is not an SSH user on 0.28; the only autogroup here is autogroup:nonroot")
        return
    if text in ("", "*"):
        raise ValueError(f"{text!r} is not an SSH user: list the login names (or autogroup:nonroot)")


def _check_check_period(text: str, version: str) -> None:
    if version == "0.28":
        if not prometheus_duration_ok(text):
            hint = " ('always' needs Headscale 0.29)" if text == "always" else ""
            raise ValueError(f"checkPeriod {text!r} is not a duration like '12h', '30m' or '1h30m'{hint}")
        return
    if text != "always":
        parse_go_duration_ns(text)


def _check_env(text: str, version: str) -> None:
    if text == "":
        raise ValueError("acceptEnv entries cannot be empty")


def _check_attr(text: str, version: str) -> None:
    if text == "funnel":
        raise ValueError("the 'funnel' node attribute is refused by Headscale (Funnel is not implemented)")


#: tailscale.com capabilities a policy may grant (Headscale refuses the rest of that domain).
_TAILSCALE_CAPS = frozenset(
    f"tailscale.com/cap/{name}" for name in ("drive", "relay", "webui", "kubernetes", "tsidp", "secrets")
)


def _check_cap(text: str, version: str) -> None:
    if "://" in text:
        raise ValueError(f"capability {text!r} must have the form '<domain>/<path>' (no URL scheme)")
    if text.startswith("tailscale.com/") and text not in _TAILSCALE_CAPS:
        raise ValueError(f"capability {text!r} is in the tailscale.com domain and not grantable by a policy")


def _check_via(text: str, version: str) -> None:
    if problem := tag_name_problem(text, version):
        raise ValueError(f"via takes tags only: {problem}")


def _check_test_proto(text: str, version: str) -> None:
    check_protocol(text, version)
    if not protocol_takes_ports(text):
        raise ValueError(f"tests only take tcp, udp or sctp (got {text!r})")


def _check_test_dst(text: str, version: str) -> None:
    alias, ports = parse_destination(text, version=version)
    if alias.text == "autogroup:internet":
        raise ValueError("autogroup:internet is not a test destination")
    if len(ports) != 1 or ports[0][0] != ports[0][1]:
        raise ValueError(f"a test destination names one port ({text!r})")
    if alias.kind is AliasKind.PREFIX and "/" in text:
        raise ValueError(f"a test destination names one host, not a CIDR ({text!r})")


def _check_ssh_test_src(text: str, version: str) -> None:
    if text == "":
        raise ValueError("an sshTests entry needs a source")
    parse_alias(text, version=version)


def _check_ssh_test_dst(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.text == "autogroup:internet":
        raise ValueError("autogroup:internet is not an sshTests destination")
    if alias.kind is AliasKind.PREFIX and alias.network is not None and alias.network.num_addresses != 1:
        raise ValueError(f"an sshTests destination names one host, not a CIDR ({text!r})")
    if alias.kind is AliasKind.TAG:
        validate_alias(alias, version)


#: Why ``ipPool`` is refused wherever it is written: as an unknown key where a model has none (the schema), and in
#: a nodeAttrs entry, whose model reads it (the semantics).
IP_POOL_REFUSAL = "Headscale refuses ipPool (it needs an IP allocator Headscale does not have)"


def _check_ip_pool(text: str, version: str) -> None:
    parse_prefix(text)


AnyAlias = Annotated[str, _rule(_check_any_alias)]
AclDst = Annotated[str, _rule(_check_acl_dst)]
SshSrc = Annotated[str, _rule(_check_ssh_src)]
SshDst = Annotated[str, _rule(_check_ssh_dst)]
SshAction = Annotated[str, _rule(_check_ssh_action)]
AclAction = Annotated[str, _rule(_check_acl_action)]
SshUser = Annotated[str, _rule(_check_ssh_user)]
Principal = Annotated[str, _rule(_check_principal)]
GroupMember = Annotated[str, _rule(_check_member)]
GroupName = Annotated[str, _rule(_check_group_name)]
TagName = Annotated[str, _rule(_check_tag_name)]
HostName = Annotated[str, _rule(_check_host_name)]
HostValue = Annotated[str, _rule(_check_host_value)]
Route = Annotated[str, _rule(_check_route)]
Proto = Annotated[str, _rule(_check_acl_proto)]
TestProto = Annotated[str, _rule(_check_test_proto)]
GrantIp = Annotated[str, _rule(_check_grant_ip)]
CheckPeriod = Annotated[str, _rule(_check_check_period)]
EnvName = Annotated[str, _rule(_check_env)]
NodeAttrName = Annotated[str, _rule(_check_attr)]
CapName = Annotated[str, _rule(_check_cap)]
ViaTag = Annotated[str, _rule(_check_via)]
TestDst = Annotated[str, _rule(_check_test_dst)]
SshTestSrc = Annotated[str, _rule(_check_ssh_test_src)]
SshTestDst = Annotated[str, _rule(_check_ssh_test_dst)]
IpPool = Annotated[str, _rule(_check_ip_pool)]


# ---------------------------------------------------------------------------------------------------------------
# The models


class _Strict(BaseModel):
    """No coercion, no unknown keys, immutable: the (normalised) document is taken as written or refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class Acl(_Strict):
    """An ACL rule: ``src`` may reach ``dst`` (``alias:ports``) over ``proto`` (default set when absent).
    Headscale takes a rule without ``action`` (as accept) and empty ``src``/``dst`` (matches nothing)."""

    action: AclAction | None = None
    proto: Proto | None = None
    src: list[AnyAlias] = Field(default_factory=list)
    dst: list[AclDst] = Field(default_factory=list)


class Grant(_Strict):
    """A grant (0.29): IP-level access (``ip``), application capabilities (``app``) and route steering (``via``)."""

    src: list[AnyAlias] = Field(default_factory=list)
    dst: list[AnyAlias] = Field(default_factory=list)
    ip: list[GrantIp] | None = None
    app: dict[CapName, list[Any]] | None = None
    via: list[ViaTag] | None = None


class SshRule(_Strict):
    """A Tailscale SSH rule; ``check`` re-authenticates on 0.29 and behaves like ``accept`` on 0.28."""

    action: SshAction | None = None
    src: list[SshSrc] = Field(default_factory=list)
    dst: list[SshDst] = Field(default_factory=list)
    users: list[SshUser] = Field(default_factory=list)
    check_period: CheckPeriod | None = Field(default=None, alias="checkPeriod")
    accept_env: list[EnvName] | None = Field(default=None, alias="acceptEnv")


class AutoApprovers(_Strict):
    """Who may get advertised routes (per CIDR) or exit-node status approved without an operator."""

    routes: dict[Route, list[Principal]] | None = None
    exit_node: list[Principal] | None = Field(default=None, alias="exitNode")


class NodeAttr(_Strict):
    """Node capabilities handed to every node matching ``target`` (0.29); an entry without ``attr`` is a no-op."""

    target: list[AnyAlias] = Field(default_factory=list)
    attr: list[NodeAttrName] | None = None
    ip_pool: list[IpPool] | None = Field(default=None, alias="ipPool")


class PolicyTest(_Strict):
    """A reachability assertion Headscale evaluates when the policy is written (0.29)."""

    src: str
    proto: TestProto | None = None
    accept: list[TestDst] | None = None
    deny: list[TestDst] | None = None


class SshPolicyTest(_Strict):
    """An SSH reachability assertion per login user (0.29)."""

    src: SshTestSrc
    dst: list[SshTestDst] = Field(default_factory=list)
    accept: list[str] | None = None
    deny: list[str] | None = None
    check: list[str] | None = None


class Policy(_Strict):
    """A Headscale policy document; build it with :func:`validate_policy` (the version is part of the rules)."""

    groups: dict[GroupName, list[GroupMember]] | None = None
    hosts: dict[HostName, HostValue] | None = None
    tag_owners: dict[TagName, list[Principal]] | None = Field(default=None, alias="tagOwners")
    acls: list[Acl] | None = None
    grants: list[Grant] | None = None
    ssh: list[SshRule] | None = None
    auto_approvers: AutoApprovers | None = Field(default=None, alias="autoApprovers")
    node_attrs: list[NodeAttr] | None = Field(default=None, alias="nodeAttrs")
    tests: list[PolicyTest] | None = None
    ssh_tests: list[SshPolicyTest] | None = Field(default=None, alias="sshTests")
    randomize_client_port: bool | None = Field(default=None, alias="randomizeClientPort")


def policy_document(policy: Policy) -> dict[str, Any]:
    """The policy as a JSON-ready dict with Headscale's key names; absent keys stay absent ({} ≠ {"acls": []})."""
    return policy.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---------------------------------------------------------------------------------------------------------------
# Validation errors as problems, with a hint for an unknown key


#: Tailscale keys Headscale does not implement at all.
_NOT_IN_HEADSCALE = {
    "postures": "device postures are not supported by Headscale",
    "srcPosture": "device postures are not supported by Headscale",
    "defaultSrcPosture": "device postures are not supported by Headscale",
    "ipsets": "IP sets are not supported by Headscale",
}
#: Words people write for a key that difflib cannot relate to the real name.
_KEY_SYNONYMS = {
    "source": "src",
    "sources": "src",
    "destination": "dst",
    "destinations": "dst",
    "protocol": "proto",
    "ports": "dst",
    "user": "users",
    "targets": "target",
    "attrs": "attr",
}


def validation_problems(exc: ValidationError) -> list[PolicyProblem]:
    """One problem per error of a schema validation, at its path; an unknown key gets the closest known one."""
    problems: list[PolicyProblem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        path = format_path(part for part in loc if part != "[key]")
        if error["type"] == "extra_forbidden":
            reason = _unknown_key_reason(loc[:-1], str(loc[-1]))
        elif error["type"] == "missing":
            reason = "required key is missing"
        else:
            reason = error["msg"]
        problems.append(PolicyProblem(path, reason))
    return problems


def _unknown_key_reason(parent: tuple[str | int, ...], key: str) -> str:
    if key.startswith("#"):
        return f"unknown key {key!r}: keep notes as // comments (Headscale only ignores '#' keys inside ACL rules)"
    if key in _NOT_IN_HEADSCALE:
        return f"{key!r} is not supported: {_NOT_IN_HEADSCALE[key]}"
    if key == "ipPool":
        return IP_POOL_REFUSAL
    model = _model_at(parent)
    allowed = [field.alias or name for name, field in model.model_fields.items()] if model else []
    synonym = _KEY_SYNONYMS.get(key.lower())
    if synonym in allowed:
        return f"unknown key {key!r}; did you mean {synonym!r}?"
    return f"unknown key {key!r}{did_you_mean(key, allowed)}"


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that validated the object at ``loc`` (to suggest its keys)."""
    model: type[BaseModel] = Policy
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        field_info = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field_info is None:
            return None
        inner = _without_none(field_info.annotation)
        if get_origin(inner) is list:
            if not parts or not isinstance(parts.pop(0), int):
                return None
            inner = get_args(inner)[0]
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return model


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation
