"""Headscale's config.yaml, rendered from typed inputs (``HeadscaleConfigInput``).

Pure (no Pulumi, no I/O) so it is tested directly against the upstream example configs. Two rules shape it:

- Only keys of the configured release are emitted. 0.28 and 0.29 differ (0.29 refuses to start with
  ``randomize_client_port`` and moved the ephemeral timeout under ``node``), so every version-dependent key is
  chosen from the minor of ``HeadscaleConfigInput.version``.
- No secret value is ever rendered. The Noise and DERP keys and the OIDC client secret are files on a Secret
  mount; the PostgreSQL password reaches Headscale as the environment variable ``PASSWORD_ENV``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from headscale_ha.components.settings import (
    SUPPORTED_HEADSCALE_MINORS,
    DerpSettings,
    HeadscaleSettings,
    OidcSettings,
    Prefixes,
)

#: Environment variable that carries the PostgreSQL password (Headscale has no ``pass_file`` option).
PASSWORD_ENV = "HEADSCALE_DATABASE_POSTGRES_PASS"

#: gRPC admin API on loopback only: nothing outside the pod reaches it (the CLI in the pod uses the unix socket).
GRPC_LISTEN_ADDR = "127.0.0.1:50443"
HTTP_PORT = 8080
METRICS_PORT = 9090
STUN_PORT = 3478


@dataclass(frozen=True, kw_only=True)
class HeadscalePaths:
    """Where the Deployment mounts things; the defaults are what the Headscale component uses."""

    data_dir: str = "/var/lib/headscale"  # RWO volume in the sqlite stage
    noise_key: str = "/etc/headscale/identity/noise_private.key"  # read-only Secret mount
    derp_key: str = "/etc/headscale/identity/derp_private.key"
    oidc_client_secret: str = "/etc/headscale/oidc/client_secret"
    policy: str = "/etc/headscale/policy/policy.json"  # the rendered tailnet policy, read-only ConfigMap mount
    run_dir: str = "/var/run/headscale"  # emptyDir for the unix socket


#: libpq sslmodes Headscale passes on (it also takes true/false); only these two check who the server is.
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
VERIFYING_SSL_MODES = ("verify-ca", "verify-full")


@dataclass(frozen=True, kw_only=True)
class PostgresConnection:
    """Where Headscale finds PostgreSQL; the password comes from ``PASSWORD_ENV`` and is never rendered."""

    host: str  # must be a name in the server certificate with verify-full
    port: int = 5432
    name: str
    user: str
    # verify-full: TLS, a server certificate signed by the trusted CA, and issued for ``host``. Headscale's pgx
    # driver reads that CA from the file named by the PGSSLROOTCERT environment variable (config.yaml has no key
    # for it); without one it falls back to the system trust store, which does not hold CloudNativePG's own CA.
    ssl: str = "verify-full"

    def __post_init__(self) -> None:
        if self.ssl not in SSL_MODES:
            raise ValueError(f"ssl {self.ssl!r}: expected one of {', '.join(SSL_MODES)} (a libpq sslmode)")


@dataclass(frozen=True, kw_only=True)
class SqliteDatabase:
    """Headscale's own SQLite file (the sqlite and migrating stages); written with a WAL, as Litestream needs."""

    path: str  # the database file, on the pod's data volume


@dataclass(frozen=True, kw_only=True)
class HeadscaleDns:
    """What Headscale pushes to clients' resolvers."""

    base_domain: str  # MagicDNS suffix of node names; neither the server's hostname nor a parent of it
    nameservers: tuple[str, ...]  # global resolvers, in the order clients try them
    split: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # split-DNS zone -> resolvers answering it


@dataclass(frozen=True, kw_only=True)
class HeadscaleConfigInput:
    """Everything config.yaml is rendered from, and nothing else."""

    server_hostname: str  # public name of the server: server_url is https://<server_hostname>
    version: str  # Headscale release (0.28.x or 0.29.x): selects the keys that release knows
    prefixes: Prefixes = field(default_factory=Prefixes)  # tailnet address ranges and their allocation
    ephemeral_inactivity_timeout: str = "30m"  # Go duration after which offline ephemeral nodes are removed
    log_level: str = "info"  # trace, debug, info, warn or error (logged as JSON)
    derp: DerpSettings = field(default_factory=DerpSettings)  # DERP maps to load and the embedded relay, if any
    oidc: OidcSettings | None = None  # OIDC login; None: none (the client secret is a file, see ``paths``)
    dns: HeadscaleDns  # MagicDNS and the resolvers pushed to clients
    database: SqliteDatabase | PostgresConnection  # where Headscale keeps its state
    paths: HeadscalePaths = field(default_factory=HeadscalePaths)  # where the pod mounts keys, secrets, socket
    #: True: Headscale reads the policy from ``paths.policy`` (file mode: enforced from its first start);
    #: False: database mode, where the policy is whatever was last written over the API (allow-all until then).
    policy_file: bool = True

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @classmethod
    def from_settings(
        cls,
        settings: HeadscaleSettings,
        *,
        server_hostname: str,
        prefixes: Prefixes,
        dns: HeadscaleDns,
        database: SqliteDatabase | PostgresConnection,
        paths: HeadscalePaths,
        policy_file: bool,
    ) -> HeadscaleConfigInput:
        """The inputs from the stack's `headscale` section and what the site decides: the one place a key of that
        section is mapped to config.yaml (a new key is added to the section model, here, and in the renderer)."""
        return cls(
            server_hostname=server_hostname,
            version=settings.version,
            prefixes=prefixes,
            ephemeral_inactivity_timeout=settings.ephemeral_inactivity_timeout,
            log_level=settings.log_level,
            derp=settings.derp,
            oidc=settings.oidc,
            dns=dns,
            database=database,
            paths=paths,
            policy_file=policy_file,
        )


def render_headscale_config(spec: HeadscaleConfigInput) -> dict[str, Any]:
    """Headscale's configuration as a mapping, with only the keys of the release ``spec.version``.

    Raises ValueError when the version is not one whose keys are known, or when no DERP relay would be left for
    clients.
    """
    minor = spec.minor
    if minor not in SUPPORTED_HEADSCALE_MINORS:
        raise ValueError(
            f"version {spec.version}: no config keys known for {minor} (known: {', '.join(SUPPORTED_HEADSCALE_MINORS)})"
        )
    paths = spec.paths
    rendered: dict[str, Any] = {
        "server_url": f"https://{spec.server_hostname}",
        "listen_addr": f"0.0.0.0:{HTTP_PORT}",
        "metrics_listen_addr": f"0.0.0.0:{METRICS_PORT}",
        "grpc_listen_addr": GRPC_LISTEN_ADDR,
        "grpc_allow_insecure": False,
        "noise": {"private_key_path": paths.noise_key},
        "prefixes": {"v4": spec.prefixes.v4, "v6": spec.prefixes.v6, "allocation": spec.prefixes.allocation},
        "derp": _derp(spec),
    }
    timeout = spec.ephemeral_inactivity_timeout
    if minor == "0.28":
        rendered["ephemeral_node_inactivity_timeout"] = timeout
    else:  # 0.29 moved it under `node` (the old key is deprecated there)
        rendered["node"] = {"ephemeral": {"inactivity_timeout": timeout}}
    rendered["database"] = _database(spec.database)
    rendered["log"] = {"level": spec.log_level, "format": "json"}
    # File mode: the rendered policy is enforced from the first start and Git is its only owner (a change restarts
    # the pod). Database mode: the policy is what was last written over the API, allow-all until a first write.
    if spec.policy_file:
        rendered["policy"] = {"mode": "file", "path": paths.policy}
    else:
        rendered["policy"] = {"mode": "database", "path": ""}
    rendered["dns"] = _dns(spec.dns)
    rendered["unix_socket"] = f"{paths.run_dir.rstrip('/')}/headscale.sock"
    if spec.oidc is not None:
        rendered["oidc"] = _oidc(spec.oidc, paths)
    return rendered


def headscale_config_yaml(spec: HeadscaleConfigInput) -> str:
    """``render_headscale_config`` as YAML text; the same input always gives the same bytes (stable diffs)."""
    body = yaml.safe_dump(render_headscale_config(spec), sort_keys=False, default_flow_style=False, width=120)
    return f"# Headscale {spec.version} config, rendered by headscale-ha; edits are overwritten.\n{body}"


def _derp(spec: HeadscaleConfigInput) -> dict[str, Any]:
    """DERP map sources, and the embedded relay only when asked for (it needs UDP 3478 reachable)."""
    derp = spec.derp
    if not derp.urls and not derp.embedded:
        raise ValueError("derp: urls is empty and embedded is off, so clients would have no DERP relay")
    server: dict[str, Any] = {"enabled": derp.embedded}
    if derp.embedded:
        server |= {
            "region_id": derp.region_id,
            "region_code": derp.region_code,
            "region_name": spec.server_hostname,  # shown by `tailscale netcheck`
            "verify_clients": True,
            "stun_listen_addr": f"0.0.0.0:{STUN_PORT}",
            "private_key_path": spec.paths.derp_key,
            "automatically_add_embedded_derp_region": True,
        }
    return {"server": server, "urls": list(derp.urls)}


def _database(database: SqliteDatabase | PostgresConnection) -> dict[str, Any]:
    """SQLite until the postgres stage (the migrating stage keeps SQLite as the rollback point).

    SQLite's busy timeout is not a config key in 0.28 or 0.29 (Headscale sets it itself), so none is rendered.
    """
    if isinstance(database, SqliteDatabase):
        return {"type": "sqlite", "sqlite": {"path": database.path, "write_ahead_log": True}}
    return {
        "type": "postgres",
        "postgres": {
            "host": database.host,
            "port": database.port,
            "name": database.name,
            "user": database.user,
            "ssl": database.ssl,
        },
    }


def _dns(dns: HeadscaleDns) -> dict[str, Any]:
    """MagicDNS plus the split-DNS zones (sorted: the same zones always give the same output)."""
    return {
        "magic_dns": True,
        "base_domain": dns.base_domain,
        "override_local_dns": True,
        "nameservers": {
            "global": list(dns.nameservers),
            "split": {zone: list(dns.split[zone]) for zone in sorted(dns.split)},
        },
    }


def _oidc(oidc: OidcSettings, paths: HeadscalePaths) -> dict[str, Any]:
    """OIDC login; the client secret is read from a file, never written here."""
    block: dict[str, Any] = {
        "only_start_if_oidc_is_available": oidc.only_start_if_available,
        "issuer": oidc.issuer,
        "client_id": oidc.client_id,
        "client_secret_path": paths.oidc_client_secret,
        "scope": list(oidc.scope),
    }
    for key, values in (
        ("allowed_domains", oidc.allowed_domains),
        ("allowed_users", oidc.allowed_users),
        ("allowed_groups", oidc.allowed_groups),
    ):
        if values:
            block[key] = list(values)
    block["pkce"] = {"enabled": oidc.pkce, "method": "S256"}
    return block
