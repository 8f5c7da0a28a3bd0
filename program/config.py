"""StackConfig: the one typed source of every knob of a stack, and its loading.

Values come from Pulumi config (``Pulumi.yaml`` defaults, replaced key by key by ``Pulumi.<stack>.yaml``).
Everything is validated before a single resource is registered, and every problem is reported at once
as ``headscale-ha:<key>: <what is wrong>, got <value>``. The sections are the components' own settings
(components/settings/); only the program knows how they compose into a stack.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, get_args, get_origin

import pulumi
from pydantic import BaseModel, Field, SecretStr, TypeAdapter, ValidationError

from headscale_ha.components.config_types import ApiUrl, DnsLabel, NodePrivateKey
from headscale_ha.components.settings import (
    PROJECT,
    BackupSettings,
    ClusterSettings,
    DatabaseSettings,
    EndpointSettings,
    FieldProblemsError,
    GatewaySettings,
    HeadplaneSettings,
    HeadscaleSettings,
    MonitoringSettings,
    NetworkPolicySettings,
    RecoverySettings,
    Role,
    SettingsModel,
    Site,
    TailnetPolicySettings,
    TailnetSettings,
    location_text,
)
from headscale_ha.program.config_files import ConfigFiles, namespace_problems, read_config_files, replaced_objects
from headscale_ha.program.config_problems import GONE, SECRET_KEYS, looks_secret, problem
from headscale_ha.program.config_rules import cross_key_problems
from headscale_ha.program.engine_config import engine_config, project_directory

#: Keys this program no longer reads, and what replaced them (a leftover is refused with this hint).
RETIRED_KEYS = {
    "identityFrom": "was replaced by tailnet.identityStack (Pulumi.yaml): every site, active or standby, reads the "
    "Noise and DERP keys from the identity stack (identity/); remove identityFrom from this stack file",
}


# --------------------------------------------------------------------------------------------- the stack


class StackConfig(SettingsModel):
    """Every knob of one stack (one cluster)."""

    role: Role = Field(description="`active` serves the tailnet; `standby` keeps the identity, scaled to 0.")
    namespace: DnsLabel = Field(default="headscale", description="Namespace of the control plane.")
    cluster: ClusterSettings = Field(description="The cluster of this stack.")
    tailnet: TailnetSettings = Field(description="The tailnet shared by every stack (Pulumi.yaml).")
    headscale: HeadscaleSettings = Field(description="The Headscale server.")
    headplane: HeadplaneSettings = Field(default_factory=HeadplaneSettings, description="The Headplane web UI.")
    backup: BackupSettings = Field(default_factory=BackupSettings, description="Litestream backups.")
    database: DatabaseSettings = Field(
        default_factory=DatabaseSettings, description="Database stage and PostgreSQL cluster."
    )
    gateway: GatewaySettings = Field(
        default_factory=GatewaySettings, description="Subnet routers and gateway services."
    )
    endpoint: EndpointSettings = Field(
        default_factory=EndpointSettings, description="Public endpoint and DNS failover."
    )
    network_policy: NetworkPolicySettings = Field(default_factory=NetworkPolicySettings, description="NetworkPolicies.")
    monitoring: MonitoringSettings = Field(
        default_factory=MonitoringSettings, description="Metrics, alerts and the state exporter."
    )
    policy: TailnetPolicySettings = Field(default_factory=TailnetPolicySettings, description="The tailnet ACL policy.")
    recovery: RecoverySettings = Field(
        default_factory=RecoverySettings, description="Stated inputs of the recovery model."
    )
    kubeconfig: SecretStr | None = Field(
        default=None, description="Secret. Admin kubeconfig; default: the ambient kubeconfig."
    )
    noise_private_key: NodePrivateKey | None = Field(
        default=None,
        description="Secret. Noise key (`privkey:` + 64 hex) imported on this stack, with derpPrivateKey: instead of "
        "`tailnet.identityStack`, which it overrides.",
    )
    derp_private_key: NodePrivateKey | None = Field(
        default=None, description="Secret. Embedded-DERP key imported with noisePrivateKey (it must differ)."
    )
    oidc_client_secret: SecretStr | None = Field(
        default=None, description="Secret. OIDC client secret; required with `headscale.oidc`."
    )
    router_auth_keys: list[Annotated[SecretStr, Field(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        description="Secret. One single-use, tagged pre-auth key per subnet-router replica, in ordinal order "
        "(`pulumi config set --secret --path 'routerAuthKeys[0]' ...`); only without bootstrapApiKey, which mints "
        "them. Never a reusable key: it carries the route-approving tag.",
    )
    bootstrap_api_key: SecretStr | None = Field(
        default=None,
        description="Secret. Headscale API key the provider uses; with it the stack manages users, keys and policy.",
    )
    headscale_api_url: ApiUrl | None = Field(
        default=None,
        description="Headscale API as reached from where `pulumi up` runs: an https:// URL, or http:// to a "
        "loopback address (a `kubectl port-forward`); default the public URL, connected to at the active site's "
        "`publicAddress` when it has one (TLS and `Host` still name `publicHostname`), so a promotion reaches the "
        "new active before DNS moves.",
    )
    object_store_access_key_id: SecretStr | None = Field(
        default=None, description="Secret. S3 access key id of `database.postgres.objectStore`."
    )
    object_store_secret_access_key: SecretStr | None = Field(
        default=None, description="Secret. S3 secret access key of `database.postgres.objectStore`."
    )
    headplane_api_key: SecretStr | None = Field(
        default=None, description="Secret. Headscale API key Headplane uses for OIDC logins; required with OIDC."
    )
    witness_kubeconfig: SecretStr | None = Field(
        default=None,
        description="Secret. Kubeconfig of the witness API server, required with `tailnet.failover.automatic`: an "
        "https server, its CA data and a token allowed the failover Lease only (docs/witness-lease.md).",
    )
    peer_kubeconfigs: dict[DnsLabel, Annotated[SecretStr, Field(min_length=1)]] | None = Field(
        default=None,
        description="Secret. With `tailnet.failover.automatic` and its failsafe: per other site, a kubeconfig of "
        "that site's cluster with the token of the account it made for this one, `headscale-failsafe-<this site>` "
        "(`pulumi config set --secret --path 'peerKubeconfigs.cosmos' ...`).",
    )

    @property
    def site(self) -> Site:
        assert self.cluster.name is not None  # filled in by parse_stack_config
        return self.tailnet.site(self.cluster.name)

    @property
    def dns_zone(self) -> str:
        return self.tailnet.zone_of(self.site)


# --------------------------------------------------------------------------------------------- errors


class ConfigError(pulumi.RunError):
    """Invalid stack config; the message lists every problem, one per line."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = sorted(set(problems))
        super().__init__(
            f"invalid stack config ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n  "
            + "\n  ".join(self.problems)
        )


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``path`` (for 'did you mean' hints)."""
    model: Any = StackConfig
    for part in path:
        if isinstance(part, int):
            continue
        info = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if info is None:
            return None
        model = model_in(info.annotation)
        if model is None:
            return None
    return model


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X | None``, ``list[X]``, ``Annotated[X, ...]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def _describe(error: Mapping[str, Any], loc: tuple[str | int, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = sorted(f.alias or n for n, f in model.model_fields.items()) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(known)}"
        return f"unknown key{hint}"
    if kind == "missing":
        return "is required"
    if kind == "model_type":  # pydantic names the Python class ("instance of GatewaySettings"): no key of the config
        return "input should be an object of keys (a mapping), as in Pulumi.yaml"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return message[0].lower() + message[1:] if message else kind


def _validation_problems(key: str, exc: ValidationError, *, secret: bool = False) -> list[str]:
    """One problem per error of ``key``'s validation; a rule across fields (FieldProblemsError) is reported at each
    field it names, with that field's value. ``secret``: the key was set as a secret, so no value is shown."""
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        found = error.get("ctx", {}).get("error")
        if isinstance(found, FieldProblemsError):
            problems += [
                problem(location_text((key, *loc, *p.location)), p.message, p.value, secret=secret)
                for p in found.problems
            ]
            continue
        unknown = error["type"] == "extra_forbidden"
        problems.append(
            problem(
                location_text((key, *loc)),
                _describe(error, (key, *loc)),
                error.get("input", GONE) if error["type"] != "missing" else GONE,
                secret=secret or (unknown and looks_secret(str(loc[-1]))),
                brief=unknown,
            )
        )
    return problems


# --------------------------------------------------------------------------------------------- loading


def _needs_json(annotation: Any) -> bool:
    if get_origin(annotation) in (list, dict) or model_in(annotation) is not None:
        return True
    return any(_needs_json(arg) for arg in get_args(annotation))


def _without_bad_leaves(key: str, value: Any, exc: ValidationError) -> Any | None:
    """The section validated again with every rejected mapping entry left out (so defaults apply), or None.

    Only used to run cross-key rules alongside the section's own errors; its problems are already reported.
    """
    trimmed = copy.deepcopy(value)
    try:
        for error in exc.errors():
            *path, leaf = error["loc"] or (None,)
            holder = trimmed
            for part in path:
                holder = holder[part]
            if not isinstance(leaf, str) or not isinstance(holder, dict):
                return None
            holder.pop(leaf, None)
        return _adapter(key).validate_python(trimmed, by_alias=True)
    except (ValidationError, KeyError, IndexError, TypeError):
        return None


@functools.cache
def _adapter(key: str) -> TypeAdapter[Any]:
    """Validator of one top-level key, with the constraints declared on its field."""
    info = next(f for n, f in StackConfig.model_fields.items() if key in (n, f.alias))
    if info.annotation is None:
        raise TypeError(f"StackConfig's field for {key!r} has no annotation")
    if not info.metadata:
        return TypeAdapter(info.annotation)
    # A type made at run time from the field's own annotation, which a static checker cannot read as a type.
    return TypeAdapter(Annotated[info.annotation, *info.metadata])  # pyright: ignore[reportInvalidTypeForm, reportArgumentType]


# --------------------------------------------------------------------------------------------- parsing


def _unknown_keys(raw: Mapping[str, str], fields: Mapping[str, Any], secret_keys: set[str]) -> list[str]:
    """Keys this program no longer reads (with what replaced them) or never read (with the closest it does)."""
    problems = []
    for key in sorted(raw):
        if key in RETIRED_KEYS:
            problems.append(problem(key, RETIRED_KEYS[key], raw[key], secret=key in secret_keys, brief=True))
        elif key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            # A misspelt secret is still a secret: set as one, named like one, or close to one of SECRET_KEYS.
            hidden = key in secret_keys or looks_secret(key) or bool(close and close[0] in SECRET_KEYS)
            problems.append(problem(key, f"unknown key{hint}", raw[key], secret=hidden, brief=True))
    return problems


@dataclass
class _Sections:
    """The top-level keys as they validate one by one: the valid ones, the invalid ones without their bad leaves
    (for the rules across keys), what the files gave, and the problems found."""

    valid: dict[str, Any] = field(default_factory=dict)
    fallback: dict[str, Any] = field(default_factory=dict)
    given: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def for_rules(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.fallback.items() if v is not None}, **self.valid}


def _raw_value(key: str, field_info: Any, raw: Mapping[str, str], secret_keys: set[str]) -> tuple[Any, str | None]:
    """The key's value as given (JSON decoded where the field takes an object or a list), or its problem."""
    value: Any = raw.get(key, GONE)
    if value is not GONE and key in SECRET_KEYS and key not in secret_keys:
        what = f"must be a secret (pulumi config set --secret {key} ...), a plain value would be stored in clear"
        return GONE, problem(key, what, value)
    if value is not GONE and _needs_json(field_info.annotation) and isinstance(value, str):
        try:
            return json.loads(value), None
        except json.JSONDecodeError:
            return GONE, problem(key, "must be an object or a list", value, secret=key in secret_keys)
    return value, None


def _validate_section(key: str, field_info: Any, value: Any, sections: _Sections, *, stack: str, secret: bool) -> None:
    """Validate one top-level key into ``sections``: its default when unset, else its value (the cluster's name
    defaulting to the stack's)."""
    if value is GONE:
        if field_info.is_required():
            sections.problems.append(problem(key, "is required", GONE))
        else:
            sections.valid[key] = field_info.get_default(call_default_factory=True)
        return
    sections.given[key] = value
    if key == "cluster" and isinstance(value, dict) and value.get("name") is None:
        value = {**value, "name": stack}
    try:
        sections.valid[key] = _adapter(key).validate_python(value, by_alias=True)
    except ValidationError as exc:
        sections.problems += _validation_problems(key, exc, secret=secret)
        # Without its bad leaves the section may still be good enough for the cross-key rules.
        sections.fallback[key] = _without_bad_leaves(key, value, exc)


def parse_stack_config(
    raw: Mapping[str, str],
    *,
    stack: str,
    secret_keys: Iterable[str] = (),
    other_keys: Iterable[str] = (),
    files: ConfigFiles | None = None,
) -> StackConfig:
    """Validate raw config values (as Pulumi hands them over: strings, JSON for objects) into a StackConfig.

    ``raw`` maps keys of this project's namespace, without the ``headscale-ha:`` prefix, to their values;
    ``secret_keys`` names those set as secrets. ``other_keys``: the fully qualified keys of every other namespace
    (a namespace close to this project's name is refused as a typo). ``files``: what the project's files set, for
    the hints that name a file (``read_config_files``). Raises ConfigError with every problem found.
    """
    fields = {info.alias or name: info for name, info in StackConfig.model_fields.items()}
    secret_keys = set(secret_keys)
    sections = _Sections()
    sections.problems += namespace_problems(other_keys, files, known=list(fields))
    sections.problems += _unknown_keys(raw, fields, secret_keys)
    for key, field_info in fields.items():
        value, refused = _raw_value(key, field_info, raw, secret_keys)
        if refused is not None:
            sections.problems.append(refused)
            continue
        _validate_section(key, field_info, value, sections, stack=stack, secret=key in secret_keys)
    problems = sections.problems
    problems += cross_key_problems(sections.for_rules())
    problems += replaced_objects(problems, sections.given, files)
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({key: sections.valid[key] for key in fields if key in sections.valid})


# --------------------------------------------------------------------------------------------- loading


def load_stack_config() -> StackConfig:
    """Read this project's keys from Pulumi config (stack file over Pulumi.yaml) and validate them."""
    values, secret = engine_config()
    prefix = f"{pulumi.get_project()}:"
    stack = pulumi.get_stack()
    return parse_stack_config(
        {key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)},
        stack=stack,
        secret_keys={key[len(prefix) :] for key in secret if key.startswith(prefix)},
        other_keys=[key for key in values if not key.startswith(prefix)],
        files=read_config_files(project_directory(), stack=stack),
    )


def stack_reference_hint(
    config: Mapping[str, str], *, project: str, stack: str, secret_keys: Iterable[str], referenced: str
) -> str | None:
    """Which key of a stack's config (fully qualified, CLI wire form) names the stack ``referenced`` that one of its
    StackReferences reads, and what to do when that stack does not exist; None when no key does or the config is
    invalid (its ConfigError is the message then)."""
    prefix = f"{PROJECT}:"
    if project != PROJECT:
        return None
    try:
        parsed = parse_stack_config(
            {key[len(prefix) :]: value for key, value in config.items() if key.startswith(prefix)},
            stack=stack,
            secret_keys={key[len(prefix) :] for key in secret_keys if key.startswith(prefix)},
        )
    except ConfigError:
        return None
    tailnet = parsed.tailnet
    active = tailnet.site(tailnet.active_site)
    if parsed.role is Role.STANDBY and tailnet.stack_of(active) == referenced:
        return (
            f"{PROJECT}:tailnet.activeSite is {active.name}, and a standby reads the stack of its active site to check "
            f"it follows it: deploy {referenced} first"
        )
    if tailnet.identity_stack == referenced:
        return f"{PROJECT}:tailnet.identityStack names it: deploy the identity stack (identity/) {referenced} first"
    return None
