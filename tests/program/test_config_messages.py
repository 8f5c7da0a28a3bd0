"""Config messages (issue 25, item 5): a typo'd namespace is refused, cross-key errors name the key, the value and
the valid choices, a stack file that replaces a whole object says so, CIDR messages say what is wrong, and no
message shows a secret."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pulumi
import pytest
from pydantic import ValidationError

from headscale_ha.components.settings import PROJECT, TailnetSettings
from headscale_ha.program.config import ConfigError, parse_stack_config
from headscale_ha.program.config_files import read_config_files
from headscale_ha.program.engine_config import engine_config
from tests.support.config_samples import only_problem, parse, problems, raw_config, section
from tests.support.stacks import ACTIVE_STACK, IDENTITY_STACK
from tools.harness import PROJECT_DIR, UnknownStackError
from tools.plan import main as plan_main

TYPO = "headscaleha:gateway"
#: A failed StackReference read leaves coroutines the SDK never awaits: noise of a failed run, as in test_standby.py.
STRANDED = pytest.mark.filterwarnings("ignore:coroutine 'Output\\.[a-z_]+' was never awaited:RuntimeWarning")
REFUSED_TYPO = f"{TYPO}: unknown namespace 'headscaleha', so nothing reads this key; did you mean '{PROJECT}:gateway'?"


def _with_typo(project: Path, old: str = f"  {PROJECT}:gateway:", new: str = f"  {TYPO}:") -> Path:
    text = (project / "Pulumi.hydra.yaml").read_text()
    assert old in text
    (project / "Pulumi.hydra.yaml").write_text(text.replace(old, new))
    return project


def _config_error(run: Callable[[], object]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        run()
    return caught.value.problems


def _with_other_keys(*keys: str) -> list[str]:
    """The problems of hydra's config given alongside keys of other namespaces."""
    return _config_error(lambda: parse_stack_config(raw_config("hydra"), stack="hydra", other_keys=keys))


# ------------------------------------------------------------------------------------------ namespaces


def test_a_typo_in_the_namespace_is_refused_with_the_key_it_meant() -> None:
    assert _with_other_keys(TYPO) == [REFUSED_TYPO]


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("headscale:gateway", "gateway"),
        ("Headscale-HA:gateway", "gateway"),
        ("headscale_ha:cluster", "cluster"),
        ("headscaleha:gatway", "gateway"),  # a misspelt key too: the suggestion is the key it is closest to
        ("headscale-ha-identity:noisePrivateKey", "noisePrivateKey"),  # the identity project's keys are not read here
    ],
)
def test_every_namespace_close_to_the_project_is_refused(key: str, meant: str) -> None:
    namespace = key.split(":")[0]
    assert _with_other_keys(key) == [
        f"{key}: unknown namespace {namespace!r}, so nothing reads this key; did you mean '{PROJECT}:{meant}'?"
    ]


def test_the_engine_and_provider_namespaces_and_unrelated_ones_are_left_alone() -> None:
    keys = ["kubernetes:context", "kubernetes:enableServerSideApply", "pulumi:tags", "random:seed", "aws:region"]
    assert parse_stack_config(raw_config("hydra"), stack="hydra", other_keys=keys).role == "active"


def test_the_offline_plan_refuses_a_typo_in_a_stack_file_and_names_the_file(
    project_copy, run_stack, monkeypatch
) -> None:
    """Before: `headscaleha:gateway:` planned with exit 0, the routers at their defaults."""
    project = _with_typo(project_copy())
    monkeypatch.chdir(project)  # the CLI starts the program in the project directory
    found = _config_error(lambda: run_stack("hydra", project_dir=project))
    assert found == [
        f"{TYPO}: unknown namespace 'headscaleha' in Pulumi.hydra.yaml, so nothing reads this key; did you mean "
        f"'{PROJECT}:gateway'?"
    ]


def test_a_typo_in_pulumi_yaml_names_pulumi_yaml(project_copy, run_stack, monkeypatch) -> None:
    project = project_copy()
    with (project / "Pulumi.yaml").open("a") as project_file:
        project_file.write("  headscale:endpoint:\n    value: {ttl: 30}\n")
    monkeypatch.chdir(project)
    assert _config_error(lambda: run_stack("hydra", project_dir=project)) == [
        "headscale:endpoint: unknown namespace 'headscale' in Pulumi.yaml, so nothing reads this key; did you mean "
        f"'{PROJECT}:endpoint'?"
    ]


def test_the_program_reads_the_files_where_the_cli_says_the_project_is(project_copy, run_stack, monkeypatch) -> None:
    """A real run names the project root (pulumi.get_root_directory); the working directory is only the fallback."""
    project = _with_typo(project_copy())
    monkeypatch.chdir(PROJECT_DIR)
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: str(project))
    (found,) = _config_error(lambda: run_stack("hydra", project_dir=project))
    assert " in Pulumi.hydra.yaml, " in found


def test_without_readable_files_the_typo_is_still_refused(project_copy, run_stack, monkeypatch, tmp_path) -> None:
    project = _with_typo(project_copy())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no Pulumi.yaml here: no file can be named
    assert _config_error(lambda: run_stack("hydra", project_dir=project)) == [REFUSED_TYPO]


def test_the_program_is_given_every_namespace_as_the_cli_hands_it_over(monkeypatch) -> None:
    """The CLI's language host passes the whole stack config, every namespace, as PULUMI_CONFIG."""
    pulumi.runtime.set_all_config({}, [])
    config = {f"{PROJECT}:role": "active", TYPO: "{}", "kubernetes:context": "hydra"}
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(config))
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps([f"{PROJECT}:kubeconfig"]))
    values, secret = engine_config()
    assert values == config
    assert secret == {f"{PROJECT}:kubeconfig"}


def test_a_secret_in_a_mistyped_namespace_is_never_shown(project_copy, run_stack, monkeypatch) -> None:
    project = project_copy()
    with (project / "Pulumi.hydra.yaml").open("a") as stack_file:
        stack_file.write("  headscaleha:kubeconfig: 'token: hunter2'\n")
    monkeypatch.chdir(project)
    (found,) = _config_error(lambda: run_stack("hydra", project_dir=project))
    assert found == (
        "headscaleha:kubeconfig: unknown namespace 'headscaleha' in Pulumi.hydra.yaml, so nothing reads this key; "
        f"did you mean '{PROJECT}:kubeconfig'?"
    )


# ------------------------------------------------------------------------------------------ cross-key messages


def test_an_unknown_active_site_names_the_key_the_choices_and_the_whole_value(project_copy, run_stack) -> None:
    """Before: `headscale-ha:tailnet: activeSite andromeda is not one of the sites, got {"activeSite": … "tail...`."""
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text()
    (project / "Pulumi.yaml").write_text(text.replace("activeSite: hydra", "activeSite: andromeda"))
    assert _config_error(lambda: run_stack("hydra", project_dir=project)) == [
        f"{PROJECT}:tailnet.activeSite: is not one of the sites (hydra, cosmos), got 'andromeda'"
    ]


def test_no_value_that_matters_is_truncated() -> None:
    long_name = "a" + "-b" * 40  # a DNS label of 81 characters is refused at its own key, shown in full
    tailnet = {**section("hydra", "tailnet"), "activeSite": "cosmos" + "x" * 150}
    for message in problems(tailnet=tailnet) + problems(cluster={**section("hydra", "cluster"), "name": long_name}):
        assert "..." not in message, message
    assert f"got '{'cosmos' + 'x' * 150}'" in only_problem(tailnet=tailnet)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {1: {"name": "hydra"}},
            "tailnet.sites[1].name: is also the name of sites[0]: site names are unique, got 'hydra'",
        ),
        (
            {1: {"gatewayIp": "172.31.250.11", "lbPool": "172.31.250.0/28", "stack": "hydra"}},
            "tailnet.sites[1].stack: is also the stack of sites[0] (hydra, by default the site name): each site needs "
            "its own, got 'hydra'",
        ),
        (
            {0: {"dnsZone": "cosmos.tn.internal.example.com"}},
            "tailnet.sites[0].dnsZone: is also the DNS zone of sites[1] (cosmos, by default "
            "<name>.tn.<internalDomain>): each site needs its own, got 'cosmos.tn.internal.example.com'",
        ),
    ],
)
def test_sites_that_share_a_value_name_the_site_that_sets_it(change: dict, expected: str) -> None:
    tailnet = section("hydra", "tailnet")
    for index, values in change.items():
        tailnet["sites"][index] |= values
    assert only_problem(tailnet=tailnet) == f"{PROJECT}:{expected}"


def test_a_repeated_user_name_is_refused_at_the_later_entry() -> None:
    """Two users of one name would register one URN twice, which the engine refuses (issue 38); the plan refuses
    them first, naming the key, the value and the earlier entry."""
    tailnet = section("hydra", "tailnet")
    first = tailnet["users"][0]
    tailnet["users"] = [*tailnet["users"], {**first, "email": "someone@example.com"}]
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.users[{len(tailnet['users']) - 1}].name: is also the name of users[0]: user names are "
        f"unique, got '{first['name']}'"
    )


def test_a_shared_gateway_ip_names_both_sites() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][1] |= {"gatewayIp": "172.30.250.10", "lbPool": "172.30.250.0/28"}
    assert problems(tailnet=tailnet) == [
        f"{PROJECT}:tailnet.sites[1].gatewayIp: is also the gatewayIp of sites[0] (hydra): each site needs its own, "
        "got '172.30.250.10'",
        f"{PROJECT}:tailnet.sites[1].lbPool: overlaps sites[0].lbPool (172.30.250.0/28) of site hydra: the routes and "
        "lbPools of two sites must not overlap, got '172.30.250.0/28'",
    ]


def test_a_downgrade_marker_names_the_version_it_must_exceed() -> None:
    headscale = {**section("hydra", "headscale"), "allowDowngradeFrom": "0.29.0"}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.allowDowngradeFrom: must be newer than version 0.29.2: it names the deployed release a "
        "downgrade leaves, got '0.29.0'"
    )


@pytest.mark.parametrize("number", [30, 1.5])
def test_a_duration_written_as_a_number_is_told_to_add_a_unit(number: float) -> None:
    """YAML reads `ephemeralInactivityTimeout: 30` as a number: the message says what to write, not the type."""
    headscale = {**section("hydra", "headscale"), "ephemeralInactivityTimeout": number}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.ephemeralInactivityTimeout: is a number without a unit: write a duration such as "
        f"{number:g}s, {number:g}m or {number:g}h, got {number}"
    )


def test_a_standby_in_the_migrating_stage_is_told_the_stages_it_may_use() -> None:
    database = {"stage": "migrating", "migration": {"image": "registry.example.com/headscale-ha/migrate:1.0.0"}}
    database["postgres"] = {"objectStore": {"destinationPath": "s3://headscale-wal/cosmos"}}
    keys = {"objectStoreAccessKeyId": "AKIA", "objectStoreSecretAccessKey": "s3cr3t"}
    assert only_problem("cosmos", database=database, secret_keys=tuple(keys), **keys) == (
        f"{PROJECT}:database.stage: a standby never migrates (role is standby): use sqlite or postgres; migrate the "
        "active stack, then move the standby to postgres, got 'migrating'"
    )


@pytest.mark.parametrize(("key", "value"), [("gateway", "5"), ("headscale", '"x"'), ("backup", "[]")])
def test_a_section_that_is_no_object_is_told_so_without_a_python_class_name(key: str, value: str) -> None:
    """pydantic's own text names the model class ("instance of GatewaySettings"), which no config key is."""
    assert only_problem(**{key: value}) == (
        f"{PROJECT}:{key}: input should be an object of keys (a mapping), as in Pulumi.yaml, got {json.loads(value)!r}"
    )


def test_a_nested_section_that_is_no_object_is_told_so_at_its_path() -> None:
    headscale = {**section("hydra", "headscale"), "derp": 7}
    assert only_problem(headscale=headscale) == (
        f"{PROJECT}:headscale.derp: input should be an object of keys (a mapping), as in Pulumi.yaml, got 7"
    )


def test_settings_built_by_hand_name_the_field_too() -> None:
    """Another program validating a component's settings reads the same field, value and choices."""
    tailnet = {**section("hydra", "tailnet"), "activeSite": "andromeda"}
    with pytest.raises(
        ValidationError, match=r"activeSite: is not one of the sites \(hydra, cosmos\), got 'andromeda'"
    ):
        TailnetSettings.model_validate(tailnet)


# ----------------------------------------------------------------------------------- a standby without its active


@STRANDED
def test_a_standby_whose_active_is_not_there_names_the_key_and_says_deploy_it_first(run_stack, stack_outputs) -> None:
    """Before: only `unknown stack 'organization/headscale-ha/hydra': a StackReference needs an existing stack ...`."""
    del stack_outputs[ACTIVE_STACK]
    with pytest.raises(UnknownStackError) as caught:
        run_stack("cosmos", stack_outputs=stack_outputs)
    assert str(caught.value) == (
        f"unknown stack '{ACTIVE_STACK}': a StackReference needs an existing stack (offline: its outputs; given: "
        f"{IDENTITY_STACK}); {PROJECT}:tailnet.activeSite is hydra, and a standby reads the stack of its active site "
        f"to check it follows it: deploy {ACTIVE_STACK} first"
    )


@STRANDED
def test_a_site_whose_identity_stack_is_not_there_says_deploy_it_first(run_stack) -> None:
    with pytest.raises(UnknownStackError) as caught:
        run_stack("hydra", stack_outputs={})
    assert str(caught.value) == (
        f"unknown stack '{IDENTITY_STACK}': a StackReference needs an existing stack (offline: its outputs; given: "
        f"none); {PROJECT}:tailnet.identityStack names it: deploy the identity stack (identity/) {IDENTITY_STACK} "
        "first"
    )


def test_the_offline_plan_of_a_standby_alone_says_deploy_the_active_first(tmp_path: Path, capsys) -> None:
    """A project with the standby's stack file only: the plan cannot plan the active first."""
    for name in ("Pulumi.yaml", "Pulumi.cosmos.yaml"):
        (tmp_path / name).write_text((PROJECT_DIR / name).read_text())
    assert plan_main(["--project-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--stack", "cosmos"]) == 1
    assert (
        f"error: stack cosmos: unknown stack '{ACTIVE_STACK}': a StackReference needs an existing stack (offline: its "
        f"outputs; given: {IDENTITY_STACK}); {PROJECT}:tailnet.activeSite is hydra, and a standby reads the stack of "
        f"its active site to check it follows it: deploy {ACTIVE_STACK} first\n"
    ) in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ a replaced object


PARTIAL_HEADSCALE = f"  {PROJECT}:headscale:\n    logLevel: debug\n"
REPLACED = [
    f"{PROJECT}:headscale.image: is required, got nothing",
    f"{PROJECT}:headscale.version: is required, got nothing",
    f"{PROJECT}:headscale: the object in Pulumi.cosmos.yaml replaces Pulumi.yaml's whole object (objects are not "
    "merged): copy the keys you keep (image, version)",
]


def _cosmos_with(project_copy, extra: str) -> Path:
    project = project_copy()
    with (project / "Pulumi.cosmos.yaml").open("a") as stack_file:
        stack_file.write(extra)
    return project


def test_a_partial_object_in_a_stack_file_says_it_replaced_pulumi_yaml_s(project_copy, run_stack, monkeypatch) -> None:
    """Before: only `headscale.image: is required` and `headscale.version: is required`."""
    project = _cosmos_with(project_copy, PARTIAL_HEADSCALE)
    monkeypatch.chdir(project)
    assert _config_error(lambda: run_stack("cosmos", project_dir=project)) == REPLACED


def test_the_hint_lists_what_a_cross_key_rule_misses_too(project_copy) -> None:
    tailnet = {k: v for k, v in section("cosmos", "tailnet").items() if k != "identityStack"}
    project = _cosmos_with(project_copy, f"  {PROJECT}:tailnet: {json.dumps(tailnet)}\n")
    raw = raw_config("cosmos") | {"tailnet": json.dumps(tailnet)}
    found = _config_error(
        lambda: parse_stack_config(raw, stack="cosmos", files=read_config_files(project, stack="cosmos"))
    )
    assert found[-1] == (
        f"{PROJECT}:tailnet: the object in Pulumi.cosmos.yaml replaces Pulumi.yaml's whole object (objects are not "
        "merged): copy the keys you keep (identityStack)"
    )


def test_the_hint_is_only_given_when_the_files_hold_the_value_the_program_was_given(project_copy) -> None:
    """The files are read for the hint alone: a value that is not the stack file's (an ESC environment, another
    --config-file) gets the plain message, never a claim about a file that did not set it."""
    project = _cosmos_with(project_copy, PARTIAL_HEADSCALE)
    files = read_config_files(project, stack="cosmos")
    assert files is not None
    raw = raw_config("cosmos") | {"headscale": json.dumps({"logLevel": "debug"})}
    assert _config_error(lambda: parse_stack_config(raw, stack="cosmos", files=files)) == REPLACED
    raw["headscale"] = json.dumps({"logLevel": "warn"})
    assert _config_error(lambda: parse_stack_config(raw, stack="cosmos", files=files)) == REPLACED[:2]
    assert _config_error(lambda: parse_stack_config(raw, stack="cosmos", files=None)) == REPLACED[:2]


def test_a_stack_object_alone_gets_no_hint(project_copy) -> None:
    """An object only the stack file sets replaced nothing: its missing keys are simply missing."""
    project = _cosmos_with(project_copy, f"  {PROJECT}:database:\n    postgres: {{replicaSource: streaming}}\n")
    project_file = project / "Pulumi.yaml"
    assert "  database:" not in project_file.read_text()
    files = read_config_files(project, stack="cosmos")
    raw = raw_config("cosmos") | {"database": json.dumps({"postgres": {"replicaSource": "streaming"}})}
    (found,) = _config_error(lambda: parse_stack_config(raw, stack="cosmos", files=files))
    assert found.startswith(f"{PROJECT}:database.postgres.streamingHost: is required")


# ------------------------------------------------------------------------------------------ CIDRs


@pytest.mark.parametrize(
    ("lb_pool", "expected"),
    [
        ("172.30.250.0/33", "has prefix length 33, out of range for IPv4 (0 to 32)"),
        ("172.30.250.1/28", "has host bits set: with this prefix length the network is 172.30.250.0/28"),
        ("172.30.250.0/x", "has prefix length 'x', not a number from 0 to 32 (IPv4)"),
        (
            "172.30.250.256/28",
            "must be a network <address>/<prefix length> such as 10.244.0.0/16: '172.30.250.256' is not an IPv4 or "
            "IPv6 address",
        ),
    ],
)
def test_a_bad_cidr_says_what_is_wrong(lb_pool: str, expected: str) -> None:
    """Before: every one of these was `must be a network in CIDR form with no host bits set`."""
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][0]["lbPool"] = lb_pool
    assert only_problem(tailnet=tailnet) == f"{PROJECT}:tailnet.sites[0].lbPool: {expected}, got {lb_pool!r}"


def test_an_ipv6_prefix_length_is_checked_against_128() -> None:
    tailnet = {**section("hydra", "tailnet"), "prefixes": {"v6": "fd7a:115c:a1e0::/129"}}
    assert only_problem(tailnet=tailnet) == (
        f"{PROJECT}:tailnet.prefixes.v6: has prefix length 129, out of range for IPv6 (0 to 128), "
        "got 'fd7a:115c:a1e0::/129'"
    )


def test_the_networks_accepted_before_are_accepted_unchanged() -> None:
    tailnet = section("hydra", "tailnet")
    tailnet["sites"][0]["routes"] = ["10.244.0.0/255.255.0.0", "10.96.0.10"]
    assert parse_stack_config(raw_config(tailnet=tailnet), stack="hydra").tailnet.sites[0].routes == [
        "10.244.0.0/16",
        "10.96.0.10/32",
    ]


# ------------------------------------------------------------------------------------------ secrets


def test_a_misspelt_secret_key_never_shows_its_value() -> None:
    found = problems(kubeconfg="apiVersion: v1\ntoken: hunter2\n")
    assert found == [f"{PROJECT}:kubeconfg: unknown key; did you mean 'kubeconfig'?, got [secret]"]


def test_an_unknown_key_set_as_a_secret_never_shows_its_value() -> None:
    assert problems(secret_keys=("tyop",), tyop="hunter2") == [f"{PROJECT}:tyop: unknown key, got [secret]"]


def test_a_secret_nested_where_it_does_not_belong_is_not_shown() -> None:
    oidc = {"issuer": "https://id.example.com", "clientId": "hs", "allowAnyAccount": True, "clientSecret": "hunter2"}
    (found,) = [p for p in problems(headscale={**section("hydra", "headscale"), "oidc": oidc}) if "clientSecret" in p]
    assert found == (f"{PROJECT}:headscale.oidc.clientSecret: unknown key; did you mean 'clientId'?, got [secret]")


def test_a_key_set_as_a_secret_shows_no_value_in_any_of_its_problems() -> None:
    backup = {**section("hydra", "backup"), "nfs": {"server": "nfs.example.com", "path": "hunter2-relative"}}
    (found,) = problems(secret_keys=("backup",), backup=backup)
    assert found.startswith(f"{PROJECT}:backup.nfs.path: must be an absolute path")
    assert found.endswith("got [secret]")


# ------------------------------------------------------------------------------------------ what reaches a command


def test_a_secret_under_a_mistyped_key_is_never_echoed() -> None:
    assert problems(bootstrapApikey="hskey-api-hunter2") == [
        f"{PROJECT}:bootstrapApikey: unknown key; did you mean 'bootstrapApiKey'?, got [secret]"
    ]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://headscale.example.com", "must be https://: plain http:// would send the Headscale API key in clear"),
        ("http://10.0.0.1:8080", "must be https://: plain http:// would send the Headscale API key in clear"),
        ("ftp://127.0.0.1", "must be an https:// URL (or http:// to a loopback address)"),
    ],
)
def test_the_headscale_api_in_clear_is_refused_except_on_loopback(url: str, expected: str) -> None:
    (found,) = problems(headscaleApiUrl=url)
    assert found.startswith(f"{PROJECT}:headscaleApiUrl: {expected}")
    assert url in found


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "http://localhost:8080/", "http://[::1]:8080", "https://hs.lan"]
)
def test_https_or_a_port_forward_to_loopback_is_accepted(url: str) -> None:
    assert parse_stack_config(raw_config(headscaleApiUrl=url), stack="hydra").headscale_api_url == url


@pytest.mark.parametrize(
    ("key", "edit", "where"),
    [
        ("cluster", lambda c: c["apiServer"].update(host="10.10.0.10,fork"), "cluster.apiServer.host"),
        ("backup", lambda b: b["nfs"].update(server="nfs server"), "backup.nfs.server"),
        (
            "gateway",
            lambda g: g["services"].update(
                proxies=[{"name": "ssh", "port": 22, "targetHost": "bastion:99", "targetPort": 22}]
            ),
            "gateway.services.proxies[0].targetHost",
        ),
    ],
)
def test_a_host_that_would_add_command_options_is_refused(key: str, edit: Callable[[dict], None], where: str) -> None:
    value = section("hydra", key)
    edit(value)
    found = [p for p in problems(**{key: value}) if p.startswith(f"{PROJECT}:{where}:")]
    assert len(found) == 1, problems(**{key: value})
    assert "must be a DNS name (lowercase letters, digits, '-' and '.') or an IPv4 or IPv6 address" in found[0]


def test_a_data_volume_too_small_for_a_restore_is_refused_naming_the_size_it_needs() -> None:
    """The restore keeps the verified snapshot beside Litestream's output on the data volume: a volume below three
    times the stated database size would fill mid-restore, so the plan refuses it with the size that fits."""
    headscale = section("hydra", "headscale") | {"storageSize": "100Mi"}
    (found,) = problems("hydra", headscale=headscale)
    assert found.startswith(f"{PROJECT}:headscale.storageSize: cannot hold a restore")
    assert "recovery.headscaleDatabaseSize (64Mi)" in found
    assert found.endswith("make it at least 192Mi, got '100Mi'")
    headplane = section("hydra", "headplane") | {"storageSize": "256Mi"}
    recovery = {"headplaneDatabaseSize": "100Mi"}
    (found,) = problems("hydra", headplane=headplane, recovery=recovery)
    assert "headplane.storageSize" in found
    assert "make it at least 300Mi" in found
    assert parse("hydra", headscale=section("hydra", "headscale") | {"storageSize": "192Mi"})
