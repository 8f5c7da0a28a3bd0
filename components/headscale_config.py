"""Headscale's config.yaml, rendered from the typed stack config.

Pure (no Pulumi, no I/O) so it is tested directly against the upstream example configs. Two rules shape it:

- Only keys of the configured release are emitted. 0.28 and 0.29 differ (0.29 refuses to start with
  ``randomize_client_port`` and moved the ephemeral timeout under ``node``), so every version-dependent key is
  chosen from ``config.headscale.minor``.
- No secret value is ever rendered. The Noise and DERP keys and the OIDC client secret are files on a Secret
  mount; the PostgreSQL password reaches Headscale as the environment variable ``PASSWORD_ENV``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from components.settings import SUPPORTED_HEADSCALE_MINORS, DatabaseStage
from program.config import StackConfig

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
    run_dir: str = "/var/run/headscale"  # emptyDir for the unix socket


@dataclass(frozen=True, kw_only=True)
class PostgresConnection:
    """Where Headscale finds PostgreSQL; the password comes from ``PASSWORD_ENV`` and is never rendered."""

    host: str
    port: int = 5432
    name: str
    user: str
    # CloudNativePG always serves TLS; "require" encrypts without checking the CA (verify-full would need the
    # cluster CA mounted). Headscale takes true/false or a libpq sslmode here.
    ssl: str = "require"


def render_headscale_config(
    config: StackConfig,
    *,
    paths: HeadscalePaths = HeadscalePaths(),
    postgres: PostgresConnection | None = None,
) -> dict[str, Any]:
    """Headscale's configuration as a mapping, with only the keys of ``config.headscale.minor``.

    Raises ValueError when the stage is ``postgres`` without a ``postgres`` connection, when the version is not
    one whose keys are known, or when no DERP relay would be left for clients.
    """
    minor = config.headscale.minor
    if minor not in SUPPORTED_HEADSCALE_MINORS:
        raise ValueError(
            f"headscale.version {config.headscale.version}: no config keys known for {minor} "
            f"(known: {', '.join(SUPPORTED_HEADSCALE_MINORS)})"
        )
    rendered: dict[str, Any] = {
        "server_url": f"https://{config.tailnet.public_hostname}",
        "listen_addr": f"0.0.0.0:{HTTP_PORT}",
        "metrics_listen_addr": f"0.0.0.0:{METRICS_PORT}",
        "grpc_listen_addr": GRPC_LISTEN_ADDR,
        "grpc_allow_insecure": False,
        "noise": {"private_key_path": paths.noise_key},
        "prefixes": {
            "v4": config.tailnet.prefixes.v4,
            "v6": config.tailnet.prefixes.v6,
            "allocation": config.tailnet.prefixes.allocation,
        },
        "derp": _derp(config, paths),
    }
    timeout = config.headscale.ephemeral_inactivity_timeout
    if minor == "0.28":
        rendered["ephemeral_node_inactivity_timeout"] = timeout
    else:  # 0.29 moved it under `node` (the old key is deprecated there)
        rendered["node"] = {"ephemeral": {"inactivity_timeout": timeout}}
    rendered["database"] = _database(config, paths, postgres)
    rendered["log"] = {"level": config.headscale.log_level, "format": "json"}
    # The ACL policy lives in the database so the provider can set it over the API without a restart.
    rendered["policy"] = {"mode": "database", "path": ""}
    rendered["dns"] = _dns(config)
    rendered["unix_socket"] = f"{paths.run_dir.rstrip('/')}/headscale.sock"
    if config.headscale.oidc is not None:
        rendered["oidc"] = _oidc(config, paths)
    return rendered


def headscale_config_yaml(config: StackConfig, **kwargs: Any) -> str:
    """``render_headscale_config`` as YAML text; the same config always gives the same bytes (stable diffs)."""
    body = yaml.safe_dump(
        render_headscale_config(config, **kwargs), sort_keys=False, default_flow_style=False, width=120
    )
    return f"# Headscale {config.headscale.version} config, rendered by headscale-ha; edits are overwritten.\n{body}"


def _derp(config: StackConfig, paths: HeadscalePaths) -> dict[str, Any]:
    """DERP map sources, and the embedded relay only when asked for (it needs UDP 3478 reachable)."""
    derp = config.headscale.derp
    if not derp.urls and not derp.embedded:
        raise ValueError("headscale.derp: urls is empty and embedded is off, so clients would have no DERP relay")
    server: dict[str, Any] = {"enabled": derp.embedded}
    if derp.embedded:
        server |= {
            "region_id": derp.region_id,
            "region_code": derp.region_code,
            "region_name": config.tailnet.public_hostname,  # shown by `tailscale netcheck`
            "verify_clients": True,
            "stun_listen_addr": f"0.0.0.0:{STUN_PORT}",
            "private_key_path": paths.derp_key,
            "automatically_add_embedded_derp_region": True,
        }
    return {"server": server, "urls": list(derp.urls)}


def _database(config: StackConfig, paths: HeadscalePaths, postgres: PostgresConnection | None) -> dict[str, Any]:
    """SQLite on the volume until the postgres stage (the migrating stage keeps SQLite as the rollback point).

    SQLite's busy timeout is not a config key in 0.28 or 0.29 (Headscale sets it itself), so none is rendered.
    """
    if config.database.stage is not DatabaseStage.POSTGRES:
        return {
            "type": "sqlite",
            "sqlite": {"path": f"{paths.data_dir.rstrip('/')}/db.sqlite", "write_ahead_log": True},
        }
    if postgres is None:
        raise ValueError("postgres: a PostgresConnection is required when database.stage is postgres")
    return {
        "type": "postgres",
        "postgres": {
            "host": postgres.host,
            "port": postgres.port,
            "name": postgres.name,
            "user": postgres.user,
            "ssl": postgres.ssl,
        },
    }


def _dns(config: StackConfig) -> dict[str, Any]:
    """MagicDNS plus one split-DNS zone per site, answered by that site's gateway IP (sorted: stable output)."""
    tailnet = config.tailnet
    split = {tailnet.zone_of(site): [site.gateway_ip] for site in tailnet.sites}
    return {
        "magic_dns": True,
        "base_domain": tailnet.base_domain,
        "override_local_dns": True,
        "nameservers": {
            "global": list(tailnet.nameservers),
            "split": {zone: split[zone] for zone in sorted(split)},
        },
    }


def _oidc(config: StackConfig, paths: HeadscalePaths) -> dict[str, Any]:
    """OIDC login; the client secret is read from a file, never written here."""
    oidc = config.headscale.oidc
    assert oidc is not None
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
