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
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import pulumi
import yaml
from pydantic import BaseModel, Field, SecretStr, TypeAdapter, ValidationError

from headscale_ha.components.config_types import ApiUrl, DnsLabel, NodePrivateKey
from headscale_ha.components.settings import (
    PROJECT,
    BackupSettings,
    ClusterSettings,
    DatabaseSettings,
    DatabaseStage,
    EndpointSettings,
    FailoverMode,
    FieldProblemsError,
    GatewaySettings,
    HeadplaneSettings,
    HeadscaleSettings,
    MonitoringSettings,
    NetworkPolicySettings,
    RecoverySettings,
    ReplicaSource,
    Role,
    SettingsModel,
    Site,
    TailnetPolicySettings,
    TailnetSettings,
    location_text,
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
        "loopback address (a `kubectl port-forward`); default the public URL.",
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


def _shown(value: object, *, brief: bool = False) -> str:
    """The value as a message shows it: in full, unless ``brief`` (a value nothing reads: an unknown key's)."""
    if value is _GONE:
        return "nothing"
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, dict | list) else repr(value)
    return text if not brief or len(text) <= 120 else text[:117] + "..."


def _problem(key: str, what: str, value: object, *, secret: bool = False, brief: bool = False) -> str:
    """``headscale-ha:<key>: <what>, got <value>``; the value of a secret key (or one marked ``secret``) is hidden."""
    secret = secret or key.split(".")[0].split("[")[0] in SECRET_KEYS
    return f"{PROJECT}:{key}: {what}, got {'[secret]' if secret and value is not _GONE else _shown(value, brief=brief)}"


#: A name that may hold a secret although it is no key of SECRET_KEYS (a misspelt or misplaced one).
_SECRET_WORDS = re.compile(r"secret|password|passwd|token|private|apikey|authkey|accesskey", re.IGNORECASE)


def _looks_secret(name: str) -> bool:
    """True for a key name that may hold a secret: one of SECRET_KEYS misspelt, or a secret-sounding word."""
    return bool(_SECRET_WORDS.search(name) or difflib.get_close_matches(name, SECRET_KEYS, n=1, cutoff=0.8))


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
                _problem(location_text((key, *loc, *p.location)), p.message, p.value, secret=secret)
                for p in found.problems
            ]
            continue
        unknown = error["type"] == "extra_forbidden"
        problems.append(
            _problem(
                location_text((key, *loc)),
                _describe(error, (key, *loc)),
                error.get("input", _GONE) if error["type"] != "missing" else _GONE,
                secret=secret or (unknown and _looks_secret(str(loc[-1]))),
                brief=unknown,
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
            expected = Role.ACTIVE if is_active_site else Role.STANDBY
            problems.append(
                _problem(
                    "role",
                    f"disagrees with tailnet.activeSite ({active_site}): site {sections['cluster'].name} "
                    f"(cluster.name) must be '{expected.value}', as exactly one site is active; to promote, change "
                    "activeSite and the role of both stacks together",
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
        for index, site in enumerate(sections["tailnet"].sites):
            if site.public_address is None:
                problems.append(
                    _problem(
                        f"tailnet.sites[{index}].publicAddress",
                        f"is required with endpoint.failover externalDns: the public record points at the active "
                        f"site's publicAddress, and site {site.name} may become the active one",
                        _GONE,
                    )
                )
    standby = have("role") and sections["role"] is Role.STANDBY
    if have("database"):
        postgres_settings = sections["database"].postgres
        if postgres_settings.replica_source is ReplicaSource.STREAMING and postgres_settings.streaming_host is None:
            problems.append(
                _problem(
                    "database.postgres.streamingHost",
                    "is required when database.postgres.replicaSource is streaming: the address of the active "
                    "cluster's PostgreSQL as this standby reaches it (or replicaSource: archive)",
                    _GONE,
                )
            )
    if standby and have("database") and sections["database"].stage is DatabaseStage.MIGRATING:
        problems.append(
            _problem(
                "database.stage",
                "a standby never migrates (role is standby): use sqlite or postgres; migrate the active stack, then "
                "move the standby to postgres",
                "migrating",
            )
        )
    if have("monitoring") and sections["monitoring"].enabled and sections["monitoring"].runbook_url is None:
        problems.append(
            _problem(
                "monitoring.runbookUrl",
                "is required with monitoring.enabled: the URL of this project's docs/operations.md on your Git host, "
                "which every alert links to (<url>#runbook-<alert>)",
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
        for credential in ("objectStoreAccessKeyId", "objectStoreSecretAccessKey") if needs_store else ():
            if not sections.get(credential):
                problems.append(
                    _problem(
                        credential,
                        f"is required in the {stage} stage (database.stage): S3 credentials of the WAL archive "
                        f"(database.postgres.objectStore); pulumi config set --secret {credential} ...",
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


# --------------------------------------------------------------------------------------------- where values came from

#: Namespaces besides this project's that a stack may set: the engine's own and those of the provider packages the
#: program uses (requirements.txt: pulumi-kubernetes, pulumi-random). A key of any other namespace close to this
#: project's name is refused as a typo: nothing would read it, and its key would silently take its default.
KNOWN_NAMESPACES = ("pulumi", "kubernetes", "random")


@dataclass(frozen=True)
class ConfigFiles:
    """The config blocks of the project's ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml``, as the program reads them.

    The CLI merges the two before the program sees a value, so only the files can tell where a value came from.
    Used for hints only, never as a source of values, and only where the value the program was given is the one
    the file holds. Keys are fully qualified (``headscale-ha:headscale``).
    """

    stack_file: str
    project_values: Mapping[str, Any]
    stack_values: Mapping[str, Any]

    def file_of(self, key: str) -> str | None:
        """The file that sets ``key`` (the stack file's value wins, as in the CLI), or None."""
        if key in self.stack_values:
            return self.stack_file
        return "Pulumi.yaml" if key in self.project_values else None


def read_config_files(directory: Path, *, stack: str) -> ConfigFiles | None:
    """The config of ``directory``'s Pulumi.yaml (this project's) and stack file, or None when either is missing or
    unreadable (the CLI reports those; the hints that would name a file are then left out)."""
    try:
        project_doc = yaml.safe_load((directory / "Pulumi.yaml").read_text())
        if not isinstance(project_doc, dict) or project_doc.get("name") != PROJECT:
            return None
        stack_dir = directory / str(project_doc.get("stackConfigDir") or ".")
        names = (f"Pulumi.{stack}.yaml", f"Pulumi.{stack}.yml")
        stack_path = next((stack_dir / name for name in names if (stack_dir / name).is_file()), None)
        stack_doc = yaml.safe_load(stack_path.read_text()) if stack_path is not None else None
    except (OSError, yaml.YAMLError):
        return None
    if stack_path is None or not isinstance(stack_doc, dict | None):
        return None
    project_config, stack_config = project_doc.get("config") or {}, (stack_doc or {}).get("config") or {}
    if not isinstance(project_config, dict) or not isinstance(stack_config, dict):
        return None
    project_values = {}
    for key, declaration in project_config.items():
        if isinstance(declaration, dict):  # project config declares a value (or a default) under `value:`
            if "value" not in declaration and "default" not in declaration:
                continue
            declaration = declaration.get("value", declaration.get("default"))
        project_values[str(key) if ":" in str(key) else f"{PROJECT}:{key}"] = declaration
    return ConfigFiles(
        stack_file=stack_path.name,
        project_values=project_values,
        stack_values={str(key): value for key, value in stack_config.items()},
    )


def _namespace_problems(keys: Iterable[str], files: ConfigFiles | None) -> list[str]:
    """Keys of a namespace that is not this project's but is close to its name: a typo nothing reads."""
    known = [field.alias or name for name, field in StackConfig.model_fields.items()]
    problems = []
    for key in sorted(keys):
        namespace, colon, name = key.partition(":")
        if not colon or namespace in (PROJECT, *KNOWN_NAMESPACES):
            continue
        if not difflib.get_close_matches(namespace.lower(), [PROJECT], n=1):
            continue
        suggestion = name if name in known else next(iter(difflib.get_close_matches(name, known, n=1)), name)
        where = files.file_of(key) if files is not None else None
        # Never the value: a key in any namespace may hold a secret.
        problems.append(
            f"{key}: unknown namespace {namespace!r}{f' in {where}' if where else ''}, so nothing reads this key; "
            f"did you mean '{PROJECT}:{suggestion}'?"
        )
    return problems


#: A problem as ``_problem`` writes it for a value that is not there: the key path it names.
_MISSING = re.compile(rf"^{re.escape(PROJECT)}:(?P<path>[^:\s]+): .*, got nothing$", re.DOTALL)
_PATH_PART = re.compile(r"[^.\[\]]+|\[(\d+)\]")


def _path_in(value: Any, path: str) -> bool:
    """Whether ``path`` (``sites[1].publicAddress``) is set in ``value``."""
    for match in _PATH_PART.finditer(path):
        if match.group(1) is not None:
            index = int(match.group(1))
            if not isinstance(value, list) or index >= len(value):
                return False
            value = value[index]
        elif isinstance(value, dict) and match.group(0) in value:
            value = value[match.group(0)]
        else:
            return False
    return value is not None


def _replaced_objects(problems: Iterable[str], given: Mapping[str, Any], files: ConfigFiles | None) -> list[str]:
    """For each object the stack file sets over Pulumi.yaml's, when a key the config now lacks is in Pulumi.yaml's
    object: the stack file replaced the whole object (the CLI does not merge objects), so say which keys to copy."""
    if files is None:
        return []
    dropped: dict[str, list[str]] = {}
    for problem in problems:
        match = _MISSING.match(problem)
        top, _, rest = match["path"].partition(".") if match else ("", "", "")
        if "[" in top:
            top, rest = top.split("[", 1)[0], top[top.index("[") :] + (f".{rest}" if rest else "")
        key = f"{PROJECT}:{top}"
        project_value = files.project_values.get(key)
        if (
            rest
            and key in files.stack_values
            and isinstance(project_value, dict)
            and given.get(top, _GONE) == files.stack_values[key]  # the program was given the stack file's object
            and _path_in(project_value, rest)
        ):
            dropped.setdefault(top, []).append(rest)
    return [
        f"{PROJECT}:{top}: the object in {files.stack_file} replaces Pulumi.yaml's whole object (objects are not "
        f"merged): copy the keys you keep ({', '.join(sorted(set(paths)))})"
        for top, paths in dropped.items()
    ]


# --------------------------------------------------------------------------------------------- parsing


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
    fields = {field.alias or name: field for name, field in StackConfig.model_fields.items()}
    secret_keys = set(secret_keys)
    problems: list[str] = _namespace_problems(other_keys, files)
    sections: dict[str, Any] = {}
    fallback: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for key in sorted(raw):
        if key in RETIRED_KEYS:
            problems.append(_problem(key, RETIRED_KEYS[key], raw[key], secret=key in secret_keys, brief=True))
        elif key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            # A misspelt secret is still a secret: set as one, named like one, or close to one of SECRET_KEYS.
            hidden = key in secret_keys or _looks_secret(key) or bool(close and close[0] in SECRET_KEYS)
            problems.append(_problem(key, f"unknown key{hint}", raw[key], secret=hidden, brief=True))
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
                problems.append(_problem(key, "must be an object or a list", value, secret=key in secret_keys))
                continue
        if value is _GONE:
            if field.is_required():
                problems.append(_problem(key, "is required", _GONE))
                continue
            sections[key] = field.get_default(call_default_factory=True)
            continue
        given[key] = value
        if key == "cluster" and isinstance(value, dict) and value.get("name") is None:
            value = {**value, "name": stack}
        try:
            sections[key] = _adapter(key).validate_python(value, by_alias=True)
        except ValidationError as exc:
            problems += _validation_problems(key, exc, secret=key in secret_keys)
            # Without its bad leaves the section may still be good enough for the cross-key rules.
            fallback[key] = _without_bad_leaves(key, value, exc)
    problems += _cross_checks({**{k: v for k, v in fallback.items() if v is not None}, **sections})
    problems += _replaced_objects(problems, given, files)
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({key: sections[key] for key in fields if key in sections})


# --------------------------------------------------------------------------------------------- loading


def engine_config() -> tuple[dict[str, str], set[str]]:
    """Every config key the engine gave the program, of every namespace (fully qualified, CLI wire form), and the
    secret ones. The one place that reads the SDK's config store: the CLI's language host hands the whole stack
    config over as PULUMI_CONFIG (and PULUMI_CONFIG_SECRET_KEYS); mocks and tests set it with set_all_config."""
    available = {**pulumi.runtime.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    values = {key: str(pulumi.runtime.get_config(key)) for key in available}
    secret = {key for key in values if pulumi.runtime.is_config_secret(key)}
    secret |= set(pulumi.runtime.config.get_config_secret_keys_env())
    return values, secret


def project_directory() -> Path:
    """Where Pulumi.yaml is: the root directory the CLI names, else the working directory (where it starts us)."""
    return Path(pulumi.get_root_directory() or os.getcwd())


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
