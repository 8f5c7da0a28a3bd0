"""Headscale config renderer: only keys the configured release knows, no secret values, stable output."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.headscale import headscale_config_input
from headscale_ha.components.headscale_config import (
    PASSWORD_ENV,
    HeadscaleConfigInput,
    HeadscaleDns,
    HeadscalePaths,
    PostgresConnection,
    SqliteDatabase,
    headscale_config_yaml,
    render_headscale_config,
)
from headscale_ha.components.settings import DatabaseStage, DerpSettings, HeadscaleSettings, OidcSettings, Prefixes
from headscale_ha.program import args
from headscale_ha.program.config import ConfigError, StackConfig
from tests.support.config_samples import NOISE, section
from tests.support.headscale_config_samples import (
    OIDC,
    commented_keys,
    enclosing_keys,
    key_paths,
    secret_values,
    stack_config,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
HEADSCALE_REFERENCE = SHARED / "reference" / "headscale"
VERSIONS = {"0.28": "0.28.0", "0.29": "0.29.2"}

#: Maps whose keys are user data (DNS zones, IdP parameters), not config keys: checked as one leaf.
USER_DATA_MAPS = frozenset({("dns", "nameservers", "split"), ("oidc", "extra_params")})

DEFAULT_PATHS = HeadscalePaths()
PG = PostgresConnection(host="headscale-pg-rw.headscale.svc", name="headscale", user="headscale")


# ------------------------------------------------------------------------------------------ helpers


def config_input(
    config: StackConfig, *, postgres: PostgresConnection = PG, paths: HeadscalePaths = DEFAULT_PATHS
) -> HeadscaleConfigInput:
    """The renderer's inputs the program derives for a stack (through the server's Args), with this test's paths
    and, in the postgres stage, its connection."""
    server = args.headscale_server_args(config, args.render_stack_policy(config))
    derived = headscale_config_input(server)
    database: SqliteDatabase | PostgresConnection = SqliteDatabase(path=f"{paths.data_dir}/db.sqlite")
    if config.database.stage is DatabaseStage.POSTGRES:
        database = postgres
    return replace(derived, database=database, paths=paths)


_COMMENTED_HEADER = re.compile(r"^(?P<indent> *)# (?P<key>[a-z_]+):\s*$")


def commented_blocks(text: str) -> list[tuple[tuple[str, ...], Any]]:
    """Commented-out example blocks (``# oidc:``, ``  # postgres:``) parsed as YAML, each with its parent path.

    A block runs while lines keep the header's ``#`` column and stay indented below the header (blank lines
    allowed); a comment back at the header's level (``# Logtail configuration``) ends it.
    """
    lines = text.splitlines()
    blocks: list[tuple[tuple[str, ...], Any]] = []
    for index, line in enumerate(lines):
        header = _COMMENTED_HEADER.match(line)
        if not header:
            continue
        marker = header["indent"] + "#"
        body: list[str] = []
        for follow in lines[index + 1 :]:
            if not follow.strip():
                body.append("")
                continue
            if not follow.startswith(marker):
                break
            rest = follow[len(marker) :]
            rest = rest[1:] if rest.startswith(" ") else rest
            if rest.strip() and not rest.startswith(" "):
                break
            body.append(rest)
        parsed = yaml.safe_load("\n".join([f"{header['key']}:", *body]))
        blocks.append((enclosing_keys(lines, index, len(header["indent"])), parsed))
    return blocks


def example_keys(minor: str) -> set[tuple[str, ...]]:
    """Key paths of the release's upstream config-example.yaml, its commented-out blocks (OIDC, PostgreSQL) included."""
    example = HEADSCALE_REFERENCE / VERSIONS[minor] / "config-example.yaml"
    if not example.is_file():
        pytest.skip(f"{example} is absent: the upstream Headscale example configs (../shared/reference) are not here")
    text = example.read_text()
    keys = key_paths(yaml.safe_load(text)) | commented_keys(text)
    for parents, block in commented_blocks(text):
        keys |= {(*parents, *path) for path in key_paths(block)}
    return keys


# ------------------------------------------------------------------------------------------ upstream keys


@pytest.mark.parametrize("minor", sorted(VERSIONS))
def test_example_parser_sees_commented_blocks_and_version_differences(minor: str) -> None:
    """The key check below is only as good as this parser: it must see OIDC and PostgreSQL, and tell 0.28 from 0.29."""
    keys = example_keys(minor)
    for path in [
        ("oidc", "client_secret_path"),
        ("oidc", "pkce", "method"),
        ("oidc", "allowed_groups"),
        ("database", "postgres", "host"),
        ("database", "postgres", "ssl"),
        ("database", "sqlite", "write_ahead_log"),
        ("derp", "server", "stun_listen_addr"),
    ]:
        assert path in keys, path
    only_028 = {("randomize_client_port",), ("ephemeral_node_inactivity_timeout",), ("oidc", "expiry")}
    only_029 = {("node", "ephemeral", "inactivity_timeout"), ("node", "expiry"), ("trusted_proxies",)}
    assert only_028 <= keys if minor == "0.28" else not only_028 & keys
    assert only_029 <= keys if minor == "0.29" else not only_029 & keys
    assert ("oidc", "scope", "openid") not in keys, "lists are values, not keys"


@pytest.mark.parametrize("minor", sorted(VERSIONS))
@pytest.mark.parametrize("stage", ["sqlite", "migrating", "postgres"])
@pytest.mark.parametrize("with_oidc", [False, True], ids=["no-oidc", "oidc"])
@pytest.mark.parametrize("embedded", [False, True], ids=["derp-maps", "embedded-derp"])
def test_every_rendered_key_exists_in_the_release_example(
    minor: str, stage: str, with_oidc: bool, embedded: bool
) -> None:
    known = example_keys(minor)
    config = stack_config(VERSIONS[minor], stage=stage, oidc=OIDC if with_oidc else None, embedded=embedded)
    rendered = render_headscale_config(config_input(config))
    unknown = sorted(".".join(p) for p in key_paths(rendered, leaves=USER_DATA_MAPS) - known)
    assert not unknown, f"keys not in Headscale {VERSIONS[minor]}'s config-example.yaml: {unknown}"
    assert ("oidc" in rendered) is with_oidc
    assert rendered["database"]["type"] == ("postgres" if stage == "postgres" else "sqlite")


def test_029_render_has_none_of_the_keys_it_refuses_or_deprecates() -> None:
    rendered = render_headscale_config(
        config_input(stack_config("0.29.2", oidc=OIDC, headscale={"ephemeralInactivityTimeout": "45m"}))
    )
    assert "randomize_client_port" not in rendered
    assert "ephemeral_node_inactivity_timeout" not in rendered
    assert "expiry" not in rendered["oidc"]
    assert rendered["node"] == {"ephemeral": {"inactivity_timeout": "45m"}}


def test_028_render_keeps_the_ephemeral_timeout_at_top_level() -> None:
    rendered = render_headscale_config(
        config_input(stack_config("0.28.0", headscale={"ephemeralInactivityTimeout": "45m"}))
    )
    assert rendered["ephemeral_node_inactivity_timeout"] == "45m"
    assert "node" not in rendered


# ------------------------------------------------------------------------------------------ listeners, identity


def test_public_url_and_listeners() -> None:
    rendered = render_headscale_config(config_input(stack_config()))
    assert rendered["server_url"] == "https://headscale.example.com"
    assert rendered["listen_addr"] == "0.0.0.0:8080"
    assert rendered["metrics_listen_addr"] == "0.0.0.0:9090"
    assert rendered["grpc_listen_addr"].startswith("127.0.0.1:"), "gRPC must stay on loopback"
    assert rendered["grpc_allow_insecure"] is False


def test_keys_socket_and_database_follow_the_mount_paths() -> None:
    paths = HeadscalePaths(
        data_dir="/data",
        noise_key="/keys/noise",
        derp_key="/keys/derp",
        oidc_client_secret="/oidc/secret",
        run_dir="/run/hs",
    )
    args = replace(
        config_input(stack_config(oidc=OIDC, embedded=True), paths=paths), database=SqliteDatabase(path="/data/hs.db")
    )
    rendered = render_headscale_config(args)
    assert rendered["noise"] == {"private_key_path": "/keys/noise"}
    assert rendered["derp"]["server"]["private_key_path"] == "/keys/derp"
    assert rendered["oidc"]["client_secret_path"] == "/oidc/secret"
    assert rendered["unix_socket"] == "/run/hs/headscale.sock"
    assert rendered["database"]["sqlite"]["path"] == "/data/hs.db"


def test_default_paths_are_the_secret_mounts() -> None:
    rendered = render_headscale_config(config_input(stack_config(embedded=True)))
    assert rendered["noise"]["private_key_path"] == "/etc/headscale/identity/noise_private.key"
    assert rendered["derp"]["server"]["private_key_path"] == "/etc/headscale/identity/derp_private.key"
    assert rendered["unix_socket"] == "/var/run/headscale/headscale.sock"


def test_prefixes_come_from_the_tailnet() -> None:
    tailnet = {**section("hydra", "tailnet"), "prefixes": {"v4": "100.64.8.0/22", "allocation": "random"}}
    rendered = render_headscale_config(config_input(stack_config(tailnet=tailnet)))
    assert rendered["prefixes"] == {"v4": "100.64.8.0/22", "v6": "fd7a:115c:a1e0::/48", "allocation": "random"}


# ------------------------------------------------------------------------------------------ DERP


def test_without_embedded_derp_only_the_maps_are_configured() -> None:
    derp = render_headscale_config(config_input(stack_config()))["derp"]
    assert derp == {"server": {"enabled": False}, "urls": ["https://controlplane.tailscale.com/derpmap/default"]}


def test_embedded_derp_uses_the_configured_region_and_stun_port() -> None:
    config = stack_config(headscale={"derp": {"embedded": True, "regionId": 901, "regionCode": "hydra", "urls": []}})
    derp = render_headscale_config(config_input(config))["derp"]
    server = derp["server"]
    assert server["enabled"] is True
    assert (server["region_id"], server["region_code"]) == (901, "hydra")
    assert server["stun_listen_addr"] == "0.0.0.0:3478"
    assert server["verify_clients"] is True
    assert server["automatically_add_embedded_derp_region"] is True
    assert derp["urls"] == []


def test_no_relay_at_all_is_refused() -> None:
    # StackConfig refuses this too; the renderer keeps its own guard for configs built without validation.
    valid = stack_config()
    derp = valid.headscale.derp.model_copy(update={"embedded": False, "urls": []})
    config = valid.model_copy(update={"headscale": valid.headscale.model_copy(update={"derp": derp})})
    with pytest.raises(ValueError, match=r"derp: urls is empty"):
        render_headscale_config(config_input(config))


# ------------------------------------------------------------------------------------------ database


@pytest.mark.parametrize("stage", ["sqlite", "migrating"])
def test_sqlite_and_migrating_stages_use_sqlite_on_the_volume(stage: str) -> None:
    database = render_headscale_config(config_input(stack_config(stage=stage)))["database"]
    assert database == {"type": "sqlite", "sqlite": {"path": "/var/lib/headscale/db.sqlite", "write_ahead_log": True}}


@pytest.mark.parametrize("minor", sorted(VERSIONS))
def test_no_busy_timeout_key_is_invented(minor: str) -> None:
    """Neither release has a config key for SQLite's busy timeout (Headscale sets it in code)."""
    assert not any("busy" in part for path in example_keys(minor) for part in path)
    sqlite = render_headscale_config(config_input(stack_config(VERSIONS[minor])))["database"]["sqlite"]
    assert not any("busy" in key for key in sqlite)


def test_postgres_stage_connects_without_a_password_key() -> None:
    connection = PostgresConnection(host="pg-rw", port=6432, name="hs", user="hs_app", ssl="verify-full")
    database = render_headscale_config(config_input(stack_config(stage="postgres"), postgres=connection))["database"]
    assert database == {
        "type": "postgres",
        "postgres": {"host": "pg-rw", "port": 6432, "name": "hs", "user": "hs_app", "ssl": "verify-full"},
    }
    assert PASSWORD_ENV == "HEADSCALE_DATABASE_POSTGRES_PASS", "Headscale reads database.postgres.pass from it"


def test_a_release_whose_keys_are_unknown_is_refused() -> None:
    args = replace(config_input(stack_config()), version="0.30.0")
    with pytest.raises(ValueError, match=r"version 0\.30\.0: no config keys known for 0\.30"):
        render_headscale_config(args)


# ------------------------------------------------------------------------------------------ policy, log, DNS


def test_the_policy_is_the_mounted_file_by_default_and_the_database_only_when_chosen() -> None:
    """File mode from the first start; the `apply` and `databaseUnmanaged` modes keep it in the database."""
    rendered = render_headscale_config(config_input(stack_config()))
    assert rendered["policy"] == {"mode": "file", "path": DEFAULT_PATHS.policy}
    for mode in ("apply", "databaseUnmanaged"):
        args = config_input(stack_config(policy={"mode": mode}))
        assert render_headscale_config(args)["policy"] == {"mode": "database", "path": ""}, mode


@pytest.mark.parametrize("minor", sorted(VERSIONS))
def test_both_policy_modes_are_keys_of_the_release(minor: str) -> None:
    """`file` and `database` are the modes the upstream example documents for both releases."""
    example = (HEADSCALE_REFERENCE / VERSIONS[minor] / "config-example.yaml").read_text()
    assert re.search(r"^policy:\n(?:  #[^\n]*\n)*  mode: file\n", example, flags=re.MULTILINE)
    assert '"file" or "database"' in example


def test_log_level_comes_from_config_as_json() -> None:
    rendered = render_headscale_config(config_input(stack_config(headscale={"logLevel": "debug"})))
    assert rendered["log"] == {"level": "debug", "format": "json"}


def _three_site_tailnet(*, reverse: bool = False) -> dict[str, Any]:
    tailnet = section("hydra", "tailnet")
    sites = [
        *tailnet["sites"],
        {"name": "lab", "gatewayIp": "172.29.250.10", "lbPool": "172.29.250.0/28", "dnsZone": "lab.corp.example.net"},
    ]
    return {**tailnet, "nameservers": ["9.9.9.9", "1.1.1.1"], "sites": sites[::-1] if reverse else sites}


def test_split_dns_sends_every_site_zone_to_its_gateway() -> None:
    config = stack_config(tailnet=_three_site_tailnet())
    dns = render_headscale_config(config_input(config))["dns"]
    split = dns["nameservers"]["split"]
    assert split == {config.tailnet.zone_of(site): [site.gateway_ip] for site in config.tailnet.sites}
    assert split["lab.corp.example.net"] == ["172.29.250.10"], "an explicit dnsZone wins"
    assert split["hydra.tn.internal.example.com"] == ["172.30.250.10"]
    assert list(split) == sorted(split)


def test_dns_pushes_magic_dns_and_the_global_resolvers() -> None:
    dns = render_headscale_config(config_input(stack_config(tailnet=_three_site_tailnet())))["dns"]
    assert dns["magic_dns"] is True
    assert dns["base_domain"] == "ts.example.com"
    assert dns["override_local_dns"] is True
    assert dns["nameservers"]["global"] == ["9.9.9.9", "1.1.1.1"], "resolver order is the config's"


# ------------------------------------------------------------------------------------------ OIDC


def test_no_oidc_block_without_oidc() -> None:
    assert "oidc" not in render_headscale_config(config_input(stack_config()))


def test_oidc_block_reads_the_secret_from_a_file() -> None:
    oidc = render_headscale_config(config_input(stack_config(oidc=OIDC)))["oidc"]
    assert oidc == {
        "only_start_if_oidc_is_available": True,
        "issuer": "https://id.example.com/realms/ops",
        "client_id": "headscale",
        "client_secret_path": "/etc/headscale/oidc/client_secret",
        "scope": ["openid", "profile", "email"],
        "allowed_domains": ["example.com"],
        "allowed_users": ["alice@example.com"],
        "allowed_groups": ["/ops"],
        "pkce": {"enabled": True, "method": "S256"},
    }


def test_oidc_without_allow_lists_lets_every_idp_user_in_only_on_purpose_and_pkce_can_be_off() -> None:
    open_oidc = {"issuer": "https://id.example.com", "clientId": "hs", "pkce": False}
    with pytest.raises(ConfigError, match=r"headscale-ha:headscale\.oidc: .* set allowAnyAccount: true on purpose"):
        stack_config(oidc=open_oidc)
    oidc = render_headscale_config(config_input(stack_config(oidc={**open_oidc, "allowAnyAccount": True})))["oidc"]
    assert not {"allowed_domains", "allowed_users", "allowed_groups"} & set(oidc)
    assert oidc["pkce"] == {"enabled": False, "method": "S256"}
    assert oidc["only_start_if_oidc_is_available"] is False


# ------------------------------------------------------------------------------------------ secrets, determinism


@pytest.mark.parametrize("minor", sorted(VERSIONS))
def test_no_secret_value_is_ever_rendered(minor: str) -> None:
    config = stack_config(VERSIONS[minor], stage="postgres", oidc=OIDC, embedded=True)
    text = headscale_config_yaml(config_input(config))
    secrets = secret_values(config)
    assert len(secrets) >= 3, "the fixture must actually carry the identity keys and the OIDC secret"
    for secret in secrets:
        assert secret not in text
    assert NOISE.removeprefix("privkey:") not in text
    rendered = yaml.safe_load(text)
    assert "pass" not in rendered["database"]["postgres"]
    assert "client_secret" not in rendered["oidc"]


def test_yaml_is_the_rendered_mapping_and_identical_every_time() -> None:
    config = stack_config(stage="postgres", oidc=OIDC, embedded=True)
    first, second = headscale_config_yaml(config_input(config)), headscale_config_yaml(config_input(config))
    assert first == second
    assert yaml.safe_load(first) == render_headscale_config(config_input(config))
    assert first.startswith("# Headscale 0.29.2 config")


def test_site_order_does_not_change_the_output() -> None:
    forward = headscale_config_yaml(config_input(stack_config(tailnet=_three_site_tailnet())))
    backward = headscale_config_yaml(config_input(stack_config(tailnet=_three_site_tailnet(reverse=True))))
    assert forward == backward


def test_from_settings_carries_every_key_the_section_shares_with_the_renderer() -> None:
    """The `headscale` section reaches config.yaml through one mapping: a key both models name is passed as set,
    and the keys they share are exactly the ones config.yaml renders from the section."""
    section_settings = HeadscaleSettings(
        image="ghcr.io/juanfont/headscale:0.28.0",
        version="0.28.0",
        log_level="debug",
        ephemeral_inactivity_timeout="2h",
        derp=DerpSettings(embedded=True, urls=[]),
        oidc=OidcSettings(issuer="https://login.example.org", client_id="vpn", allowed_domains=["example.org"]),
    )
    spec = HeadscaleConfigInput.from_settings(
        section_settings,
        server_hostname="vpn.example.org",
        prefixes=Prefixes(),
        dns=HeadscaleDns(base_domain="nodes.example.org", nameservers=("9.9.9.9",)),
        database=PG,
        paths=DEFAULT_PATHS,
        policy_file=False,
    )
    shared = {f.name for f in fields(HeadscaleConfigInput)} & set(HeadscaleSettings.model_fields)
    assert shared == {"version", "ephemeral_inactivity_timeout", "log_level", "derp", "oidc"}
    assert {key: getattr(spec, key) for key in shared} == {key: getattr(section_settings, key) for key in shared}
    rendered = render_headscale_config(spec)
    assert (rendered["ephemeral_node_inactivity_timeout"], rendered["log"]["level"]) == ("2h", "debug")
    assert rendered["derp"]["server"]["enabled"] is True
