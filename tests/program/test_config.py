"""StackConfig: what the shipped stacks mean, and one clear error that lists every bad input."""

from __future__ import annotations

import pytest

from headscale_ha.components.settings import PROJECT, DatabaseStage, OidcSettings, PolicyMode, Role
from headscale_ha.program.args import headplane_args, headplane_oidc_login
from tests.support.config_samples import (
    DERP,
    NOISE,
    STORE,
    STORE_KEYS,
    STORE_SECRETS,
    only_problem,
    parse,
    problems,
    raw_config,
    section,
)

#: An OIDC block with an allow-list, as every OIDC config needs (or allowAnyAccount).
OIDC_ALLOWING = {"issuer": "https://id.example.com", "clientId": "headscale", "allowedDomains": ["example.com"]}


# ------------------------------------------------------------------------------------------ shipped stacks


def test_hydra_is_the_active_multi_node_site() -> None:
    config = parse("hydra")
    assert config.role is Role.ACTIVE
    assert config.cluster.name == "hydra", "the cluster name defaults to the stack name"
    assert config.cluster.nodes > 1
    assert config.gateway.routers.replicas > 1
    assert config.database.postgres.instances == 3
    assert config.dns_zone == "hydra.tn.internal.example.com"


def test_cosmos_is_the_single_node_standby() -> None:
    config = parse("cosmos")
    assert config.role is Role.STANDBY
    assert config.cluster.nodes == 1
    assert config.gateway.routers.replicas == config.gateway.services.replicas == 1
    assert config.database.postgres.instances == 1
    assert config.site.gateway_ip == "172.31.250.10"


def test_both_stacks_share_the_tailnet_and_headscale_release() -> None:
    hydra, cosmos = parse("hydra"), parse("cosmos")
    assert hydra.tailnet == cosmos.tailnet
    assert hydra.headscale == cosmos.headscale
    assert hydra.site != cosmos.site


def test_config_is_frozen() -> None:
    config = parse("hydra")
    with pytest.raises(ValueError, match="frozen"):
        config.cluster.nodes = 7  # type: ignore[misc]


def test_defaults_fill_what_a_stack_leaves_out() -> None:
    config = parse("hydra", endpoint=None, headplane=None)
    assert config.endpoint.ttl == 60
    assert config.headplane.enabled is True
    assert config.database.stage is DatabaseStage.SQLITE


# ------------------------------------------------------------------------------------------ bad input


def test_unknown_top_level_key_is_named_with_a_suggestion() -> None:
    message = only_problem(namespce="headscale")
    assert message == f"{PROJECT}:namespce: unknown key; did you mean 'namespace'?, got 'headscale'"


def test_misspelt_nested_key_is_named_with_its_path() -> None:
    cluster = section("hydra", "cluster")
    cluster["storageClas"] = cluster.pop("storageClass")
    message = only_problem(cluster=cluster)
    assert message.startswith(f"{PROJECT}:cluster.storageClas: unknown key; did you mean 'storageClass'?")
    assert message.endswith("got 'ceph-block'")


def test_wrong_type_names_key_expectation_and_value() -> None:
    cluster = {**section("hydra", "cluster"), "nodes": "three"}
    message = only_problem(cluster=cluster)
    assert message.startswith(f"{PROJECT}:cluster.nodes: ")
    assert "integer" in message
    assert message.endswith("got 'three'")


def test_object_key_given_a_scalar_is_reported() -> None:
    assert only_problem(cluster="big") == f"{PROJECT}:cluster: must be an object or a list, got 'big'"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("cluster", "nodes"), 0, "greater than or equal to 1"),
        (("cluster", "tolerationSeconds"), 7200, "less than or equal to 3600"),
        (("endpoint", "ttl"), 1, "greater than or equal to 5"),
        (("database", "postgres", "instances"), 12, "less than or equal to 9"),
    ],
)
def test_out_of_range_values_are_refused(path: tuple[str, ...], value: int, expected: str) -> None:
    key, *inner = path
    data = section("hydra", key) if key in raw_config("hydra") else {}
    target = data
    for part in inner[:-1]:
        target = target.setdefault(part, {})
    target[inner[-1]] = value
    message = only_problem(**{key: data})
    assert message.startswith(f"{PROJECT}:{'.'.join(path)}: ")
    assert expected in message
    assert message.endswith(f"got {value}")


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ghcr.io/juanfont/headscale:latest", "moving tag 'latest'"),
        ("ghcr.io/juanfont/headscale:development", "moving tag 'development'"),
        ("ghcr.io/juanfont/headscale:main", "moving tag 'main'"),
        ("ghcr.io/juanfont/headscale:stable", "moving tag 'stable'"),
        ("ghcr.io/juanfont/headscale", "has no tag"),
        ("ghcr.io/juanfont/headscale:", "has no tag"),
        ("ghcr.io/juanfont/headscale:0.29", "not an exact version"),
        ("ghcr.io/juanfont/headscale:0.29.2@sha256:abc", "digest"),
    ],
)
def test_moving_or_unpinned_images_are_refused(image: str, expected: str) -> None:
    headscale = {**section("hydra", "headscale"), "image": image}
    message = only_problem(headscale=headscale)
    assert message.startswith(f"{PROJECT}:headscale.image: ")
    assert expected in message
    assert message.endswith(f"got {image!r}")


def test_moving_tag_in_an_optional_image_is_refused() -> None:
    gateway = {"routers": {"image": "ghcr.io/tailscale/tailscale:latest"}}
    assert only_problem(gateway=gateway).startswith(f"{PROJECT}:gateway.routers.image: uses the moving tag 'latest'")


def test_pinned_image_with_digest_is_accepted() -> None:
    image = "ghcr.io/juanfont/headscale:0.29.2@sha256:" + "0" * 64
    assert parse(headscale={**section("hydra", "headscale"), "image": image}).headscale.image == image


def test_image_tag_must_match_the_headscale_version() -> None:
    headscale = {**section("hydra", "headscale"), "version": "0.28.0"}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.image: has the tag 0.29.2, which does not match version 0.28.0: the image must be that "
        "release, got 'ghcr.io/juanfont/headscale:0.29.2'"
    )


def test_unsupported_headscale_version_is_refused() -> None:
    headscale = {"version": "0.27.1", "image": "ghcr.io/juanfont/headscale:0.27.1"}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.version: is not supported; use a 0.28.x or 0.29.x release such as 0.29.2, got '0.27.1'"
    )


def test_headscale_028_is_supported() -> None:
    headscale = {"version": "0.28.0", "image": "docker.io/headscale/headscale:v0.28.0"}
    assert parse(headscale=headscale).headscale.minor == "0.28"


def test_standby_cannot_be_in_the_migrating_stage() -> None:
    database = {
        "stage": "migrating",
        "postgres": {"objectStore": STORE},
        "migration": {"image": "registry.example.com/headscale-ha/migrate:1.0.0"},
    }
    message = only_problem("cosmos", database=database, secret_keys=STORE_SECRETS, **STORE_KEYS)
    assert message.startswith(f"{PROJECT}:database.stage: a standby never migrates")
    assert message.endswith("got 'migrating'")


def test_active_may_migrate() -> None:
    database = {"stage": "migrating", "postgres": {"instances": 3, "objectStore": STORE}}
    assert only_problem("hydra", database=database, secret_keys=STORE_SECRETS, **STORE_KEYS).startswith(
        f"{PROJECT}:database.migration.image: is required in the migrating stage"
    )
    database["migration"] = {"image": "registry.example.com/headscale-ha/migrate:1.0.0"}
    config = parse("hydra", database=database, secret_keys=STORE_SECRETS, **STORE_KEYS)
    assert config.database.stage is DatabaseStage.MIGRATING


def test_sqlite_stage_needs_the_litestream_target() -> None:
    message = only_problem(backup={})
    assert message.startswith(f"{PROJECT}:backup.nfs: is required in the sqlite stage")


def test_headplane_needs_the_litestream_target_in_the_postgres_stage_too() -> None:
    database = {"stage": "postgres", "postgres": {"instances": 3, "objectStore": STORE}}
    message = only_problem("hydra", backup={}, database=database, secret_keys=STORE_SECRETS, **STORE_KEYS)
    assert message.startswith(f"{PROJECT}:backup.nfs: is required while headplane.enabled")
    without_ui = parse(
        "hydra", backup={}, database=database, headplane={"enabled": False}, secret_keys=STORE_SECRETS, **STORE_KEYS
    )
    assert without_ui.backup.nfs is None


def test_postgres_stage_needs_wal_archiving() -> None:
    found = problems(database={"stage": "postgres", "postgres": {"instances": 3}})
    assert found == [
        f"{PROJECT}:database.postgres.objectStore: is required in the postgres stage: WAL archiving is the backup of "
        "the PostgreSQL cluster, got nothing",
        *(
            f"{PROJECT}:{key}: is required in the postgres stage (database.stage): S3 credentials of the WAL archive "
            f"(database.postgres.objectStore); pulumi config set --secret {key} ..., got nothing"
            for key in ("objectStoreAccessKeyId", "objectStoreSecretAccessKey")
        ),
    ]
    # Only the credential that is missing is named.
    (missing,) = problems(
        database={"stage": "postgres", "postgres": {"instances": 3, "objectStore": STORE}},
        secret_keys=("objectStoreAccessKeyId",),
        objectStoreAccessKeyId="AKIA",
    )
    assert missing.startswith(f"{PROJECT}:objectStoreSecretAccessKey: is required in the postgres stage")
    database = {"stage": "postgres", "postgres": {"instances": 3, "objectStore": STORE}}
    assert parse(database=database, secret_keys=STORE_SECRETS, **STORE_KEYS).database.postgres.object_store


def test_replicas_cannot_exceed_the_nodes_that_host_them() -> None:
    found = problems("cosmos", gateway={"routers": {"replicas": 2}, "services": {"replicas": 3}})
    assert found == [
        f"{PROJECT}:gateway.routers.replicas: exceeds cluster.nodes (1); replicas are spread one per node, got 2",
        f"{PROJECT}:gateway.services.replicas: exceeds cluster.nodes (1); replicas are spread one per node, got 3",
    ]


def test_cluster_must_be_a_site_of_the_tailnet() -> None:
    found = problems(cluster={**section("hydra", "cluster"), "name": "hydar"})
    assert f"{PROJECT}:cluster.name: is not a site in tailnet.sites (hydra, cosmos), got 'hydar'" in found


def test_gateway_ip_outside_its_pool_is_refused() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][0]["gatewayIp"] = "172.30.251.10"
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.sites[0].gatewayIp: is outside lbPool 172.30.250.0/28, which hands it out: pick an address "
        "inside it, got '172.30.251.10'"
    )


def test_overlapping_site_routes_are_refused() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][1]["routes"] = ["10.244.128.0/17"]
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.sites[1].routes[0]: overlaps sites[0].routes[0] (10.244.0.0/16) of site hydra: the routes "
        "and lbPools of two sites must not overlap, got '10.244.128.0/17'"
    )


def test_invalid_cidr_names_the_list_item() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][0]["routes"][1] = "10.96.0.1/16"
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.sites[0].routes[1]: has host bits set: with this prefix length the network is "
        "10.96.0.0/16, got '10.96.0.1/16'"
    )


def test_limits_below_requests_are_refused() -> None:
    resources = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "2Gi"}}
    headscale = {**section("hydra", "headscale"), "resources": resources}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.resources.limits.cpu: is below requests.cpu (2): raise it to 2 or more, got '500m'"
    )


def test_missing_required_keys_are_each_reported() -> None:
    found = problems(role=None, cluster=None)
    assert f"{PROJECT}:cluster: is required, got nothing" in found
    assert f"{PROJECT}:role: is required, got nothing" in found


def test_every_problem_is_reported_in_one_error() -> None:
    found = problems(
        "cosmos",
        role="primary",
        gateway={"routers": {"replicas": 4, "image": "ghcr.io/tailscale/tailscale:latest"}},
        headscale={**section("cosmos", "headscale"), "logLevel": "loud"},
        tyop=1,
    )
    keys = [p.split(": ", 1)[0] for p in found]
    assert keys == sorted(
        f"{PROJECT}:{k}"
        for k in ("gateway.routers.image", "gateway.routers.replicas", "headscale.logLevel", "role", "tyop")
    )


# ------------------------------------------------------------------------------------------ secrets


def test_secret_keys_must_be_set_as_secrets() -> None:
    message = only_problem(kubeconfig="apiVersion: v1\nkind: Config\n")
    assert message.startswith(f"{PROJECT}:kubeconfig: must be a secret")
    assert "apiVersion" not in message
    assert message.endswith("got [secret]")


def test_malformed_secret_is_reported_without_its_value() -> None:
    bad_key = "privkey:" + "Z" * 64
    message = only_problem(secret_keys=("noisePrivateKey",), noisePrivateKey=bad_key)
    assert message.startswith(f"{PROJECT}:noisePrivateKey: must be 'privkey:' followed by 64 lowercase hex")
    assert bad_key not in message
    assert "ZZZZ" not in message


def test_imported_identity_keys_must_differ() -> None:
    message = only_problem(
        secret_keys=("noisePrivateKey", "derpPrivateKey"), noisePrivateKey=NOISE, derpPrivateKey=NOISE
    )
    assert (
        message
        == f"{PROJECT}:derpPrivateKey: must differ from noisePrivateKey (Headscale refuses equal keys), got [secret]"
    )


def test_imported_identity_keys_are_kept_when_valid() -> None:
    config = parse(secret_keys=("noisePrivateKey", "derpPrivateKey"), noisePrivateKey=NOISE, derpPrivateKey=DERP)
    assert (config.noise_private_key, config.derp_private_key) == (NOISE, DERP)


def test_secret_strings_never_show_in_repr() -> None:
    config = parse(secret_keys=("kubeconfig",), kubeconfig="token: hunter2")
    assert "hunter2" not in repr(config)
    assert config.kubeconfig is not None
    assert config.kubeconfig.get_secret_value() == "token: hunter2"


def test_oidc_needs_its_client_secret_and_headplane_a_choice_then_an_api_key() -> None:
    """Headplane 0.6 makes the first OIDC login to an empty database its owner and enforces none of headscale.oidc's
    allowed lists: its OIDC login is chosen explicitly, never implied by Headscale's."""
    headscale = {**section("hydra", "headscale"), "oidc": {**OIDC_ALLOWING, "clientId": "hs"}}
    found = problems(headscale=headscale)
    assert len(found) == 2
    assert found[0].startswith(f"{PROJECT}:headplane.oidcLogin: must be chosen when headscale.oidc is set")
    assert "the first login to an empty database becomes its owner" in found[0]
    assert found[0].endswith("got nothing")
    assert found[1].startswith(f"{PROJECT}:oidcClientSecret: is required when headscale.oidc")
    headplane = {"oidcLogin": True}
    (found,) = problems(
        secret_keys=("oidcClientSecret",), headscale=headscale, headplane=headplane, oidcClientSecret="s"
    )
    assert found.startswith(f"{PROJECT}:headplaneApiKey: is required when headscale.oidc is set")
    config = parse(
        secret_keys=("oidcClientSecret", "headplaneApiKey"),
        headscale=headscale,
        headplane=headplane,
        oidcClientSecret="s3cret",
        headplaneApiKey="hskey-api-x",
    )
    assert config.headscale.oidc is not None
    assert config.headscale.oidc.client_id == "hs"


def test_more_than_one_headscale_replica_is_refused() -> None:
    headscale = {**section("hydra", "headscale"), "replicas": 2}
    message = only_problem(headscale=headscale)
    assert message.startswith(f"{PROJECT}:headscale.replicas: would run two Headscale writers")
    assert message.endswith("got 2")


def test_headplane_without_oidc_needs_no_api_key() -> None:
    headscale = {**section("hydra", "headscale"), "oidc": {**OIDC_ALLOWING, "clientId": "hs"}}
    config = parse(
        secret_keys=("oidcClientSecret",), headscale=headscale, headplane={"enabled": False}, oidcClientSecret="s"
    )
    assert config.headplane_api_key is None
    declined = parse(
        secret_keys=("oidcClientSecret",), headscale=headscale, headplane={"oidcLogin": False}, oidcClientSecret="s"
    )
    assert declined.headplane.oidc_login is False
    args = headplane_args(declined)
    assert args is not None
    assert args.oidc is None, "Headplane's login takes an API key only: no oidc block is rendered"
    assert args.api_key is None
    assert headplane_oidc_login(declined) is False, "nor is an API key minted for it"


def test_headplane_release_must_be_one_whose_config_is_known() -> None:
    message = only_problem(headplane={"image": "ghcr.io/tale/headplane:0.7.0-beta.4"})
    assert message.startswith(f"{PROJECT}:headplane.image: only Headplane 0.6.x config keys are known")


def test_clients_always_have_a_derp_relay() -> None:
    headscale = {**section("hydra", "headscale"), "derp": {"urls": []}}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.derp.urls: is empty and embedded is off: clients would have no DERP relay; list a DERP "
        "map or set embedded: true, got []"
    )
    headscale["derp"]["embedded"] = True
    assert parse(headscale=headscale).headscale.derp.embedded is True


def test_a_site_inside_the_tailnet_ranges_is_refused() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][0]["lbPool"] = "100.64.10.0/28"
    tailnet["sites"][0]["gatewayIp"] = "100.64.10.1"
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.sites[0].lbPool: overlaps the tailnet's own addresses (prefixes.v4 100.64.0.0/10): a "
        "gateway there would be a per-node tailnet IP, not a stable one, got '100.64.10.0/28'"
    )


def test_exactly_one_site_is_active() -> None:
    assert only_problem("cosmos", role="active") == (
        f"{PROJECT}:role: disagrees with tailnet.activeSite (hydra): site cosmos (cluster.name) must be 'standby', as "
        "exactly one site is active; to promote, change activeSite and the role of both stacks together, got 'active'"
    )
    assert only_problem("hydra", role="standby").startswith(
        f"{PROJECT}:role: disagrees with tailnet.activeSite (hydra): site hydra (cluster.name) must be 'active', "
    )
    tailnet = {**section("hydra", "tailnet"), "activeSite": "nowhere"}
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.activeSite: is not one of the sites (hydra, cosmos), got 'nowhere'"
    )


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_every_site_needs_the_identity_stack_or_both_keys(stack: str) -> None:
    tailnet = {k: v for k, v in section(stack, "tailnet").items() if k != "identityStack"}
    message = only_problem(stack, tailnet=tailnet)
    assert message.startswith(f"{PROJECT}:tailnet.identityStack: is required (the identity stack of identity/")
    assert "a site stack never generates the tailnet's keys" in message
    keys = {"noisePrivateKey": NOISE, "derpPrivateKey": DERP}
    config = parse(stack, tailnet=tailnet, secret_keys=tuple(keys), **keys)
    assert (config.noise_private_key, config.derp_private_key) == (NOISE, DERP)


def test_the_shipped_sites_read_the_identity_stack() -> None:
    for stack in ("hydra", "cosmos"):
        tailnet = parse(stack).tailnet
        assert tailnet.identity_stack == "organization/headscale-ha-identity/tailnet"
        assert tailnet.stack_prefix == "organization/headscale-ha"
    assert parse("cosmos").tailnet.stack_of(parse("cosmos").tailnet.site("hydra")) == "organization/headscale-ha/hydra"


@pytest.mark.parametrize(
    ("given", "missing"), [("noisePrivateKey", "derpPrivateKey"), ("derpPrivateKey", "noisePrivateKey")]
)
def test_one_imported_key_alone_is_refused(given: str, missing: str) -> None:
    message = only_problem(secret_keys=(given,), **{given: NOISE})
    assert message.startswith(f"{PROJECT}:{missing}: is required with {given}: import both keys")


def test_identity_from_is_refused_with_its_replacement() -> None:
    message = only_problem("cosmos", identityFrom="organization/headscale-ha/hydra")
    assert message.startswith(f"{PROJECT}:identityFrom: was replaced by tailnet.identityStack (Pulumi.yaml)")
    assert "remove identityFrom" in message


def test_site_stack_and_context_default_to_the_site_name() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][1] |= {"stack": "cosmos-prod", "kubeContext": "admin@cosmos"}
    config = parse(tailnet=tailnet)
    hydra, cosmos = config.tailnet.sites
    assert (hydra.stack_name, hydra.context) == ("hydra", "hydra")
    assert (cosmos.stack_name, cosmos.context) == ("cosmos-prod", "admin@cosmos")
    assert config.tailnet.stack_of(cosmos) == "organization/headscale-ha/cosmos-prod"


def test_site_stacks_are_unique_and_well_formed() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][1]["stack"] = "hydra"
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.sites[1].stack: is also the stack of sites[0] (hydra, by default the site name): each "
        "site needs its own, got 'hydra'"
    )
    tailnet = section("hydra", "tailnet") | {"identityStack": "headscale-ha-identity/tailnet", "stackPrefix": "a/b/c"}
    found = " ".join(problems(tailnet=tailnet))
    assert f"{PROJECT}:tailnet.identityStack: " in found
    assert f"{PROJECT}:tailnet.stackPrefix: " in found


def test_external_dns_failover_needs_every_public_address() -> None:
    tailnet = section("hydra", "tailnet")
    del tailnet["sites"][1]["publicAddress"]
    assert only_problem(tailnet=tailnet, endpoint={"failover": "externalDns"}) == (
        f"{PROJECT}:tailnet.sites[1].publicAddress: is required with endpoint.failover externalDns: the public record "
        "points at the active site's publicAddress, and site cosmos may become the active one, got nothing"
    )


def test_streaming_replicas_need_a_host() -> None:
    database = {"postgres": {"replicaSource": "streaming"}}
    assert only_problem(database=database) == (
        f"{PROJECT}:database.postgres.streamingHost: is required when database.postgres.replicaSource is streaming: "
        "the address of the active cluster's PostgreSQL as this standby reaches it (or replicaSource: archive), "
        "got nothing"
    )


# ------------------------------------------------------------------------------------------ upstream startup refusals
# Each rule by which Headscale, Headplane or Litestream refuses to start on a value our config controls is refused
# here first, naming the key. Rules the renderers make impossible are listed in the tests of the renderers.


@pytest.mark.parametrize("base_domain", ["headscale.example.com", "example.com"])
def test_base_domain_may_not_be_or_contain_the_public_hostname(base_domain: str) -> None:
    """Headscale 0.28 and 0.29 refuse to start when server_url's host equals dns.base_domain or ends in
    '.' + dns.base_domain (hscontrol/types/config.go: LoadServerConfig calls isSafeServerURL)."""
    tailnet = {**section("hydra", "tailnet"), "baseDomain": base_domain}
    message = only_problem(tailnet=tailnet)
    assert message.startswith(f"{PROJECT}:tailnet.baseDomain: must be neither publicHostname (headscale.example.com)")
    assert message.endswith(f"got {base_domain!r}")


@pytest.mark.parametrize("base_domain", ["ts.example.com", "le.com", "example.org", "headscale.example.com.ts"])
def test_base_domain_beside_the_public_hostname_is_accepted(base_domain: str) -> None:
    """The rule compares whole labels: 'le.com' is no parent of 'headscale.example.com'."""
    assert parse(tailnet={**section("hydra", "tailnet"), "baseDomain": base_domain}).tailnet.base_domain == base_domain


@pytest.mark.parametrize("version", ["0.28.0", "0.29.2"])
@pytest.mark.parametrize("timeout", ["0", "30s", "65s", "1m5s", "64s1000ms"])
def test_ephemeral_timeout_of_65s_or_less_is_refused(version: str, timeout: str) -> None:
    """Headscale 0.28 (ephemeral_node_inactivity_timeout) and 0.29 (node.ephemeral.inactivity_timeout) refuse to
    start unless the timeout is more than 65s (hscontrol/types/config.go, validateServerConfig)."""
    headscale = {
        "version": version,
        "image": f"ghcr.io/juanfont/headscale:{version}",
        "ephemeralInactivityTimeout": timeout,
    }
    message = only_problem(headscale=headscale)
    assert message.startswith(f"{PROJECT}:headscale.ephemeralInactivityTimeout: must be more than 65s")
    assert message.endswith(f"got {timeout!r}")


@pytest.mark.parametrize("timeout", ["65001ms", "66s", "30m", "2562047h"])
def test_ephemeral_timeout_above_65s_is_accepted(timeout: str) -> None:
    headscale = {**section("hydra", "headscale"), "ephemeralInactivityTimeout": timeout}
    assert parse(headscale=headscale).headscale.ephemeral_inactivity_timeout == timeout


def test_durations_go_cannot_hold_are_refused() -> None:
    """Go's time.ParseDuration refuses durations above 2^63-1 ns: Headscale then reads 0 (below its minimum) and
    Litestream 0.5.17 refuses its YAML outright."""
    headscale = {**section("hydra", "headscale"), "ephemeralInactivityTimeout": "2562048h"}
    backup = {**section("hydra", "backup"), "litestream": {"retention": "3000000h"}}
    found = problems(headscale=headscale, backup=backup)
    assert [p.split(":")[1] for p in found] == ["backup.litestream.retention", "headscale.ephemeralInactivityTimeout"]
    assert all("longer than Go's longest duration" in p for p in found)


@pytest.mark.parametrize("field", ["syncInterval", "retention"])
@pytest.mark.parametrize("duration", ["0", "0s", "0ms"])
def test_zero_litestream_durations_are_refused(field: str, duration: str) -> None:
    """Litestream 0.5.17 refuses to start when a replica's sync-interval or snapshot.retention is not greater than
    0 (cmd/litestream/main.go, ParseConfig; also checked against the binary in test_litestream_config.py)."""
    backup = {**section("hydra", "backup"), "litestream": {field: duration}}
    message = only_problem(backup=backup)
    assert message.startswith(f"{PROJECT}:backup.litestream.{field}: must be more than 0s")
    assert message.endswith(f"got {duration!r}")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://derp.example.com:port/map", "a port up to 65535"),
        ("https://derp.example.com:70000/map", "a port up to 65535"),
        ("https://derp{1}.example.com/map", "DNS name, IPv4 or [IPv6] host"),
        ("https://[fd00::1/map", "DNS name, IPv4 or [IPv6] host"),
        ("https://derp.example.com/map%2", "%XX escape"),
        ("https://derp.example.com/map\x7f", "control characters"),
    ],
)
def test_derp_map_urls_go_cannot_parse_are_refused(url: str, expected: str) -> None:
    """Headscale 0.28 and 0.29 parse every derp.urls entry with Go's url.Parse and dereference the result even when
    parsing failed, so an unparsable URL crashes the server at startup (hscontrol/types/config.go, derpConfig)."""
    headscale = {**section("hydra", "headscale"), "derp": {"urls": ["https://ok.example.com/derp.json", url]}}
    message = only_problem(headscale=headscale)
    assert message.startswith(f"{PROJECT}:headscale.derp.urls[1]: ")
    assert expected in message


@pytest.mark.parametrize(
    "url", ["https://derp.example.com/map?v=%41", "https://10.0.0.1:8443/derp.json", "https://[fd00::1]/derp"]
)
def test_parsable_derp_map_urls_are_accepted(url: str) -> None:
    headscale = {**section("hydra", "headscale"), "derp": {"urls": [url]}}
    assert parse(headscale=headscale).headscale.derp.urls == [url]


def test_oidc_issuer_must_be_a_url_both_servers_parse() -> None:
    """Headplane 0.6.3 refuses to start unless oidc.issuer is a WHATWG URL (app/server/config/config-schema.ts);
    Headscale builds its OIDC provider from the issuer and, with only_start_if_oidc_is_available, refuses to start
    when that fails (hscontrol/oidc.go)."""
    oidc = {"issuer": "https://id.example.com:443x/realms/hs", "clientId": "hs"}
    found = problems(headscale={**section("hydra", "headscale"), "oidc": oidc})
    assert any(p.startswith(f"{PROJECT}:headscale.oidc.issuer: must be https://<host>") for p in found), found


def test_an_empty_resolver_list_is_refused() -> None:
    """Headscale 0.26 and later refuse to start when dns.override_local_dns is true (as rendered) and
    dns.nameservers.global is empty (hscontrol/types/config.go, validateServerConfig)."""
    message = only_problem(tailnet={**section("hydra", "tailnet"), "nameservers": []})
    assert message.startswith(f"{PROJECT}:tailnet.nameservers: ")
    assert "at least 1 item" in message


def test_an_unknown_allocation_strategy_is_refused() -> None:
    """Headscale 0.28 and 0.29 refuse to start unless prefixes.allocation is 'sequential' or 'random'
    (hscontrol/types/config.go, LoadServerConfig)."""
    tailnet = {**section("hydra", "tailnet"), "prefixes": {"allocation": "dense"}}
    assert only_problem(tailnet=tailnet).startswith(f"{PROJECT}:tailnet.prefixes.allocation: ")


@pytest.mark.parametrize(
    ("prefixes", "expected"),
    [
        (
            {"v4": "fd7a:115c:a1e0::/48"},
            "v4: is not an IPv4 network: use one inside 100.64.0.0/10, got 'fd7a:115c:a1e0::/48'",
        ),
        (
            {"v6": "100.64.0.0/10"},
            "v6: is not an IPv6 network: use one inside fd7a:115c:a1e0::/48, got '100.64.0.0/10'",
        ),
        (
            {"v4": "10.0.0.0/8"},
            "v4: is outside 100.64.0.0/10, which is all Tailscale clients accept, got '10.0.0.0/8'",
        ),
    ],
)
def test_prefixes_of_the_wrong_family_or_range_are_reported(prefixes: dict[str, str], expected: str) -> None:
    """Headscale only warns about ranges outside 100.64.0.0/10 and fd7a:115c:a1e0::/48 (Tailscale clients do not
    work with others); the plan refuses them, and reports a prefix of the wrong family instead of crashing."""
    assert only_problem(tailnet={**section("hydra", "tailnet"), "prefixes": prefixes}) == (
        f"{PROJECT}:tailnet.prefixes.{expected}"
    )


# --------------------------------------------------------------------------- security defaults (issue 13)


def test_the_shipped_stacks_enforce_the_git_policy_from_the_first_start() -> None:
    assert parse("hydra").policy.mode is PolicyMode.FILE
    assert parse("cosmos").policy.mode is PolicyMode.FILE


def test_dry_run_is_refused_with_the_modes_that_replace_it() -> None:
    (found,) = problems(policy={"mode": "dryRun"})
    assert found.startswith(f"{PROJECT}:policy.mode: 'dryRun' was removed: it left the tailnet allow-all; use 'file'")
    assert "'databaseUnmanaged'" in found
    assert found.endswith("got 'dryRun'")


def test_database_mode_without_a_writer_is_an_explicit_choice() -> None:
    assert parse(policy={"mode": "databaseUnmanaged"}).policy.mode == "databaseUnmanaged"
    (found,) = problems(policy={"mode": "database"})
    assert found == f"{PROJECT}:policy.mode: input should be 'file', 'apply' or 'databaseUnmanaged', got 'database'"


def test_oidc_without_an_allow_list_is_refused_unless_any_account_is_allowed_on_purpose() -> None:
    open_oidc = {"issuer": "https://id.example.com", "clientId": "hs"}
    found = problems(headscale={**section("hydra", "headscale"), "oidc": open_oidc})
    assert f"{PROJECT}:headscale.oidc: allowedDomains, allowedUsers and allowedGroups are all empty" in found[0]
    assert "allowAnyAccount: true" in found[0]
    for allow in ({"allowedDomains": ["example.com"]}, {"allowedUsers": ["a@example.com"]}, {"allowedGroups": ["ops"]}):
        assert not OidcSettings.model_validate({**open_oidc, **allow}).allow_any_account
    anyone = {**section("hydra", "headscale"), "oidc": {**open_oidc, "allowAnyAccount": True}}
    config = parse(
        secret_keys=("oidcClientSecret", "headplaneApiKey"),
        headscale=anyone,
        headplane={"oidcLogin": True},
        oidcClientSecret="s3cret",
        headplaneApiKey="hskey",
    )
    assert config.headscale.oidc is not None
    assert config.headscale.oidc.allow_any_account
