"""StackConfig: the one typed source of every knob of a stack, and its loading.

Values come from Pulumi config (``Pulumi.yaml`` defaults, replaced key by key by ``Pulumi.<stack>.yaml``).
Everything is validated before a single resource is registered, and every problem is reported at once
as ``headscale-ha:<key>: <what is wrong>, got <value>``. The sections are the components' own settings
(components/settings.py); only the program knows how they compose into a stack.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, get_args, get_origin

import pulumi
from pydantic import BaseModel, Field, SecretStr, TypeAdapter, ValidationError

from components.config_types import DnsLabel, NodePrivateKey
from components.settings import (
    PROJECT,
    Backup,
    Cluster,
    Database,
    DatabaseStage,
    Endpoint,
    FailoverMode,
    Gateway,
    Headplane,
    Headscale,
    Monitoring,
    NetworkPolicy,
    Recovery,
    ReplicaSource,
    Role,
    SettingsModel,
    Site,
    Tailnet,
    TailnetPolicySettings,
)

_GONE = object()

#: Keys this program no longer reads, and what replaced them (a leftover is refused with this hint).
RETIRED_KEYS = {
    "identityFrom": "was replaced by tailnet.identityStack (Pulumi.yaml): every site, active or standby, reads the "
    "Noise and DERP keys from the identity stack (identity/); remove identityFrom from this stack file",
}


# --------------------------------------------------------------------------------------------- the stack

#: Keys whose values are secrets: they must be set with `pulumi config set --secret`.
SECRET_KEYS = (
    "kubeconfig",
    "noisePrivateKey",
    "derpPrivateKey",
    "oidcClientSecret",
    "routerAuthKeys",
    "headplaneApiKey",
    "bootstrapApiKey",
    "objectStoreAccessKeyId",
    "objectStoreSecretAccessKey",
)


class StackConfig(SettingsModel):
    """Every knob of one stack (one cluster)."""

    role: Role = Field(description="`active` serves the tailnet; `standby` keeps the identity, scaled to 0.")
    namespace: DnsLabel = Field(default="headscale", description="Namespace of the control plane.")
    cluster: Cluster = Field(description="The cluster of this stack.")
    tailnet: Tailnet = Field(description="The tailnet shared by every stack (Pulumi.yaml).")
    headscale: Headscale = Field(description="The Headscale server.")
    headplane: Headplane = Field(default_factory=Headplane, description="The Headplane web UI.")
    backup: Backup = Field(default_factory=Backup, description="Litestream backups.")
    database: Database = Field(default_factory=Database, description="Database stage and PostgreSQL cluster.")
    gateway: Gateway = Field(default_factory=Gateway, description="Subnet routers and gateway services.")
    endpoint: Endpoint = Field(default_factory=Endpoint, description="Public endpoint and DNS failover.")
    network_policy: NetworkPolicy = Field(default_factory=NetworkPolicy, description="NetworkPolicies.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="Metrics, alerts and the state exporter.")
    policy: TailnetPolicySettings = Field(default_factory=TailnetPolicySettings, description="The tailnet ACL policy.")
    recovery: Recovery = Field(default_factory=Recovery, description="Stated inputs of the recovery model.")
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
    headscale_api_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Headscale API as reached from where `pulumi up` runs (http(s) URL); default the public URL.",
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


def _shown(value: object) -> str:
    if value is _GONE:
        return "nothing"
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _problem(key: str, what: str, value: object) -> str:
    secret = key.split(".")[0].split("[")[0] in SECRET_KEYS
    return f"{PROJECT}:{key}: {what}, got {'[secret]' if secret and value is not _GONE else _shown(value)}"


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``path`` (for 'did you mean' hints)."""
    model: Any = StackConfig
    for part in path:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        model = model_in(field.annotation)
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


def _format_loc(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return message[0].lower() + message[1:] if message else kind


def _validation_problems(key: str, exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        problems.append(
            _problem(
                _format_loc((key, *loc)),
                _describe(error, (key, *loc)),
                error.get("input", _GONE) if error["type"] != "missing" else _GONE,
            )
        )
    return problems


# --------------------------------------------------------------------------------------------- loading


def _needs_json(annotation: Any) -> bool:
    if get_origin(annotation) is list or model_in(annotation) is not None:
        return True
    return any(_needs_json(arg) for arg in get_args(annotation))


def _cross_checks(sections: Mapping[str, Any]) -> list[str]:
    """Rules that span keys; each runs when the keys it reads validated on their own."""
    problems: list[str] = []

    def have(*keys: str) -> bool:
        return all(sections.get(k) is not None for k in keys)

    if have("cluster", "tailnet"):
        names = [site.name for site in sections["tailnet"].sites]
        if sections["cluster"].name not in names:
            problems.append(
                _problem(
                    "cluster.name", f"is not a site in tailnet.sites ({', '.join(names)})", sections["cluster"].name
                )
            )
    if have("cluster", "gateway"):
        nodes = sections["cluster"].nodes
        for part in ("routers", "services"):
            replicas = getattr(sections["gateway"], part).replicas
            if replicas > nodes:
                problems.append(
                    _problem(
                        f"gateway.{part}.replicas",
                        f"exceeds cluster.nodes ({nodes}); replicas are spread one per node",
                        replicas,
                    )
                )
    if have("routerAuthKeys", "gateway"):
        given, replicas = len(sections["routerAuthKeys"]), sections["gateway"].routers.replicas
        if given != replicas:
            problems.append(
                f"{PROJECT}:routerAuthKeys: needs one single-use key per router replica, in ordinal order "
                f"(gateway.routers.replicas = {replicas}), got {given} key(s)"
            )
    if (
        have("cluster", "gateway")
        and sections["gateway"].services.proxies is None
        and sections["cluster"].api_server is None
    ):
        problems.append(
            _problem(
                "cluster.apiServer",
                "is required for the default gateway proxies (kube-api, talos); "
                "set it or list gateway.services.proxies",
                _GONE,
            )
        )
    if have("cluster", "database"):
        instances = sections["database"].postgres.instances
        if instances > sections["cluster"].nodes:
            problems.append(
                _problem(
                    "database.postgres.instances",
                    f"exceeds cluster.nodes ({sections['cluster'].nodes}); instances are spread one per node",
                    instances,
                )
            )
    if have("role", "cluster", "tailnet"):
        active_site = sections["tailnet"].active_site
        is_active_site = sections["cluster"].name == active_site
        if (sections["role"] is Role.ACTIVE) != is_active_site:
            problems.append(
                _problem(
                    "role",
                    f"disagrees with tailnet.activeSite ({active_site}): exactly one site is active; to promote, "
                    "change activeSite and the role of both stacks together",
                    sections["role"].value,
                )
            )
    noise_set, derp_set = sections.get("noisePrivateKey") is not None, sections.get("derpPrivateKey") is not None
    if noise_set != derp_set:
        problems.append(
            _problem(
                "derpPrivateKey" if noise_set else "noisePrivateKey",
                f"is required with {'noisePrivateKey' if noise_set else 'derpPrivateKey'}: import both keys, or "
                "neither and take them from tailnet.identityStack",
                _GONE,
            )
        )
    if have("tailnet") and sections["tailnet"].identity_stack is None and not (noise_set or derp_set):
        problems.append(
            _problem(
                "tailnet.identityStack",
                "is required (the identity stack of identity/, e.g. organization/headscale-ha-identity/tailnet), "
                "or import noisePrivateKey and derpPrivateKey on this stack: a site stack never generates the "
                "tailnet's keys",
                _GONE,
            )
        )
    if have("endpoint", "tailnet") and sections["endpoint"].failover is FailoverMode.EXTERNAL_DNS:
        missing = sorted(site.name for site in sections["tailnet"].sites if site.public_address is None)
        if missing:
            problems.append(
                _problem(
                    "tailnet.sites",
                    f"need a publicAddress for externalDns failover (missing: {', '.join(missing)})",
                    _GONE,
                )
            )
    standby = have("role") and sections["role"] is Role.STANDBY
    if have("database"):
        postgres_settings = sections["database"].postgres
        if postgres_settings.replica_source is ReplicaSource.STREAMING and postgres_settings.streaming_host is None:
            problems.append(
                _problem("database.postgres.streamingHost", "is required when replicaSource is streaming", _GONE)
            )
    if standby and have("database") and sections["database"].stage is DatabaseStage.MIGRATING:
        problems.append(
            _problem(
                "database.stage",
                "a standby never migrates; migrate the active stack, then move the standby to postgres",
                "migrating",
            )
        )
    if have("monitoring") and sections["monitoring"].enabled and sections["monitoring"].runbook_url is None:
        problems.append(
            _problem(
                "monitoring.runbookUrl",
                "is required with monitoring.enabled: the URL of this project's README on your Git host, which every "
                "alert links to (<url>#runbook-<alert>)",
                _GONE,
            )
        )
    if have("database", "backup"):
        stage = sections["database"].stage
        if stage in (DatabaseStage.SQLITE, DatabaseStage.MIGRATING) and sections["backup"].nfs is None:
            problems.append(
                _problem(
                    "backup.nfs",
                    f"is required in the {stage} stage: Litestream is the only backup of the SQLite database",
                    _GONE,
                )
            )
        elif sections["backup"].nfs is None and have("headplane") and sections["headplane"].enabled:
            problems.append(
                _problem(
                    "backup.nfs",
                    "is required while headplane.enabled: Litestream is the only backup of Headplane's own SQLite "
                    "database (set it, or headplane.enabled: false)",
                    _GONE,
                )
            )
        needs_store = stage in (DatabaseStage.MIGRATING, DatabaseStage.POSTGRES)
        if needs_store and not (sections.get("objectStoreAccessKeyId") and sections.get("objectStoreSecretAccessKey")):
            problems.append(
                _problem(
                    "objectStoreAccessKeyId",
                    f"and objectStoreSecretAccessKey are required in the {stage} stage (WAL archive credentials)",
                    _GONE,
                )
            )
        if stage is DatabaseStage.MIGRATING and sections["database"].migration.image is None:
            problems.append(
                _problem(
                    "database.migration.image",
                    "is required in the migrating stage: build images/migrate/Dockerfile, push it, pin it here",
                    _GONE,
                )
            )
        if needs_store and sections["database"].postgres.object_store is None:
            problems.append(
                _problem(
                    "database.postgres.objectStore",
                    f"is required in the {stage} stage: WAL archiving is the backup of the PostgreSQL cluster",
                    _GONE,
                )
            )
    if have("headscale") and sections["headscale"].oidc is not None and sections.get("oidcClientSecret") is None:
        problems.append(
            _problem(
                "oidcClientSecret",
                "is required when headscale.oidc is set (pulumi config set --secret oidcClientSecret ...)",
                _GONE,
            )
        )
    if (
        have("headscale", "headplane")
        and sections["headscale"].oidc is not None
        and sections["headplane"].enabled
        and sections.get("headplaneApiKey") is None
        and sections.get("bootstrapApiKey") is None
    ):
        problems.append(
            _problem(
                "headplaneApiKey",
                "is required when headscale.oidc is set and Headplane is enabled (Headplane's OIDC login "
                "acts with a Headscale API key), unless bootstrapApiKey lets the stack mint one",
                _GONE,
            )
        )
    noise, derp = sections.get("noisePrivateKey"), sections.get("derpPrivateKey")
    if noise is not None and noise == derp:
        problems.append(
            _problem("derpPrivateKey", "must differ from noisePrivateKey (Headscale refuses equal keys)", derp)
        )
    return problems


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
    field = next(f for n, f in StackConfig.model_fields.items() if key in (n, f.alias))
    return TypeAdapter(Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation)


def parse_stack_config(raw: Mapping[str, str], *, stack: str, secret_keys: Iterable[str] = ()) -> StackConfig:
    """Validate raw config values (as Pulumi hands them over: strings, JSON for objects) into a StackConfig.

    ``raw`` maps keys of this project's namespace, without the ``headscale-ha:`` prefix, to their values.
    Raises ConfigError with every problem found.
    """
    fields = {field.alias or name: field for name, field in StackConfig.model_fields.items()}
    secret_keys = set(secret_keys)
    problems: list[str] = []
    sections: dict[str, Any] = {}
    fallback: dict[str, Any] = {}
    for key in sorted(raw):
        if key in RETIRED_KEYS:
            problems.append(_problem(key, RETIRED_KEYS[key], raw[key]))
        elif key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(_problem(key, f"unknown key{hint}", raw[key] if key not in SECRET_KEYS else _GONE))
    for key, field in fields.items():
        value: Any = raw.get(key, _GONE)
        if value is not _GONE and key in SECRET_KEYS and key not in secret_keys:
            problems.append(
                _problem(
                    key,
                    f"must be a secret (pulumi config set --secret {key} ...), a plain value would be stored in clear",
                    value,
                )
            )
            continue
        if value is not _GONE and _needs_json(field.annotation) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                problems.append(_problem(key, "must be an object or a list", value))
                continue
        if value is _GONE:
            if field.is_required():
                problems.append(_problem(key, "is required", _GONE))
                continue
            sections[key] = field.get_default(call_default_factory=True)
            continue
        if key == "cluster" and isinstance(value, dict) and value.get("name") is None:
            value = {**value, "name": stack}
        try:
            sections[key] = _adapter(key).validate_python(value, by_alias=True)
        except ValidationError as exc:
            problems += _validation_problems(key, exc)
            # Without its bad leaves the section may still be good enough for the cross-key rules.
            fallback[key] = _without_bad_leaves(key, value, exc)
    problems += _cross_checks({**{k: v for k, v in fallback.items() if v is not None}, **sections})
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({key: sections[key] for key in fields if key in sections})


def load_stack_config() -> StackConfig:
    """Read this project's keys from Pulumi config (stack file over Pulumi.yaml) and validate them."""
    project = pulumi.get_project()
    prefix = f"{project}:"
    available = {**pulumi.runtime.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    raw = {key[len(prefix) :]: str(pulumi.runtime.get_config(key)) for key in available if key.startswith(prefix)}
    secret = {key for key in raw if pulumi.runtime.is_config_secret(prefix + key)}
    secret |= {
        key[len(prefix) :] for key in pulumi.runtime.config.get_config_secret_keys_env() if key.startswith(prefix)
    }
    return parse_stack_config(raw, stack=pulumi.get_stack(), secret_keys=secret)
