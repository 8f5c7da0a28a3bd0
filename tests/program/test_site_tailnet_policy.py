"""The stack-level checks of TailnetPolicy: the policy the stacks render (one for both, their routes and tags),
its hash a stack output, ConfigError from the stack's `policy`, how Headscale's config and pod read it, the live
policy's mode and its order after the server, and what `make plan` prints. The component's own behaviour (the
ConfigMap and its hash, the live policy's mode, the allow-all warning) is tested at its seam, in
tests/components/test_tailnet_policy.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from headscale_ha.components.headscale import PATHS
from headscale_ha.components.tailnet_policy import ALLOW_ALL_WARNING, HASH_ANNOTATION, POLICY_CONFIG_MAP
from headscale_ha.program.config import ConfigError
from tools.harness import PROJECT_DIR, ProgramRun
from tools.plan import plan_stack

API_KEY = "  headscale-ha:bootstrapApiKey:\n    secure: v1:AAAA\n"


def _config_map(run) -> dict:
    (found,) = [
        o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == POLICY_CONFIG_MAP
    ]
    return found


def test_published_policy_hash_matches_text_and_output(run_stack) -> None:
    run = run_stack("hydra")
    config_map = _config_map(run)
    text = config_map["data"]["policy.json"]
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert config_map["metadata"]["annotations"][HASH_ANNOTATION] == digest
    assert run.outputs["policy"] == {
        "mode": "file",
        "sha256": digest,
        "configMap": f"headscale/{POLICY_CONFIG_MAP}",
        "enforcedFromStart": True,
        "lints": [],  # the shipped base policy is lint-free
        "testsCheckedAtApply": [],
    }


def test_one_tailnet_one_policy_on_every_stack(run_stack) -> None:
    assert _config_map(run_stack("hydra"))["data"] == _config_map(run_stack("cosmos"))["data"]


def test_every_site_route_is_auto_approved_for_its_router_tag(run_stack) -> None:
    policy = json.loads(_config_map(run_stack("cosmos"))["data"]["policy.json"])
    routes = policy["autoApprovers"]["routes"]
    assert routes["10.244.0.0/16"] == ["tag:subnet-router-hydra"]
    assert routes["172.31.250.0/28"] == ["tag:subnet-router-cosmos"]
    assert policy["hosts"]["gateway-hydra"] == "172.30.250.10/32"
    assert policy["tagOwners"]["tag:subnet-router-cosmos"] == ["group:admins"]


def test_a_broken_base_policy_fails_the_plan_with_its_path(run_stack, lab_project, tmp_path) -> None:
    broken = tmp_path / "broken.hujson"
    broken.write_text(
        "{\n  // HuJSON: comments and trailing commas\n"
        '  "groups": {"group:admins": ["alice@"]},\n'
        '  "acls": [{"action": "accept", "src": ["group:nobody"], "dst": ["*:*"]},],\n}\n'
    )
    with pytest.raises(ConfigError) as caught:
        run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {broken}}}\n"))
    assert caught.value.problems == [
        f"headscale-ha:policy ({broken}) acls[0].src[0]: group 'group:nobody' is not defined in groups"
    ]


def test_a_missing_policy_file_is_a_config_error(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"headscale-ha:policy\.file: cannot be read"):
        run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {file: policy/nope.hujson}\n"))


# ------------------------------------------------------------------------------------------ who enforces it


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    (found,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _headscale_config(run: ProgramRun) -> dict:
    return yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])


def _policy_volume(run: ProgramRun) -> dict | None:
    pod = _object(run, "Deployment", "headscale")["spec"]["template"]["spec"]
    return next((v for v in pod["volumes"] if v.get("configMap", {}).get("name") == POLICY_CONFIG_MAP), None)


def _plan(project: Path, stack: str) -> subprocess.CompletedProcess[str]:
    """`make plan` for one stack of ``project`` as a user runs it: what it prints, and outputs.json in <project>/o."""
    command = [sys.executable, "-m", "tools.plan", "--project-dir", str(project), "--stack", stack]
    return subprocess.run(
        [*command, "--out", str(project / "o")], capture_output=True, text=True, cwd=PROJECT_DIR, check=False
    )


def _live(run: ProgramRun) -> list:
    return [r for r in run.resources if r.type == "pulumi-python:dynamic/headscale:Policy"]


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_shipped_stacks_make_headscale_read_the_rendered_policy_before_it_serves(stack: str, run_stack) -> None:
    """File mode: the file Headscale loads at start is the published ConfigMap's, so no node ever meets an open
    tailnet, and the autoApprovers approve the routers' routes from the first start."""
    run = run_stack(stack)
    assert _headscale_config(run)["policy"] == {"mode": "file", "path": PATHS.policy}
    volume = _policy_volume(run)
    assert volume is not None
    assert volume["configMap"]["items"] == [{"key": "policy.json", "path": "policy.json"}]
    (container,) = _object(run, "Deployment", "headscale")["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": PATHS.policy, "subPath": "policy.json", "readOnly": True}
    served = json.loads(_config_map(run)["data"]["policy.json"])
    assert served["autoApprovers"]["routes"]["172.30.250.0/28"] == ["tag:subnet-router-hydra"]
    assert served["acls"], "deny-by-default: only what the acls accept is allowed"
    assert run.outputs["policy"]["enforcedFromStart"] is True


def test_the_pod_waits_for_the_policy_and_a_policy_change_rolls_it(run_stack, lab_project, tmp_path) -> None:
    run = run_stack("hydra")
    deployment = run.named("hydra-headscale-deployment")
    assert run.named("hydra-policy-rendered").urn in deployment.dependencies
    annotations = _object(run, "Deployment", "headscale")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/policy"] == _config_map(run)["metadata"]["annotations"][HASH_ANNOTATION]

    changed_base = tmp_path / "changed.hujson"
    base = (PROJECT_DIR / "policy" / "base.hujson").read_text()
    changed_base.write_text(base.replace('"groups": {', '"groups": {\n    "group:auditors": ["carol@"],', 1))
    changed = run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {changed_base}}}\n"))
    new = _object(changed, "Deployment", "headscale")["spec"]["template"]["metadata"]["annotations"]
    assert new["checksum/policy"] != annotations["checksum/policy"]
    assert new["checksum/config"] == annotations["checksum/config"], "only the policy changed"


def test_file_mode_with_api_access_compares_the_rolled_out_server_and_never_writes(lab_project, stack_outputs) -> None:
    run = plan_stack("lab", project_dir=lab_project(API_KEY), stack_outputs=stack_outputs)
    (live,) = _live(run)
    assert live.inputs["mode"] == "dryRun", "a file-mode server refuses writes; the provider only compares"
    assert run.named("lab-headscale-deployment").urn in live.dependencies


def test_apply_writes_over_the_api_after_the_server_rolled_out_in_database_mode(lab_project, stack_outputs) -> None:
    run = plan_stack(
        "lab", project_dir=lab_project(API_KEY + "  headscale-ha:policy: {mode: apply}\n"), stack_outputs=stack_outputs
    )
    assert _headscale_config(run)["policy"] == {"mode": "database", "path": ""}
    assert _policy_volume(run) is None, "database mode reads no file"
    (live,) = _live(run)
    assert live.inputs["mode"] == "apply"
    assert run.named("lab-headscale-deployment").urn in live.dependencies, "never written to a file-mode server"
    assert run.outputs["policy"]["enforcedFromStart"] is False


def test_apply_without_api_access_is_refused(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"headscale-ha:policy\.mode: apply needs API access"):
        run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {mode: apply}\n"))


def test_database_mode_without_a_writer_is_printed_and_shown(lab_project, stack_outputs) -> None:
    project = lab_project("  headscale-ha:policy: {mode: databaseUnmanaged}\n")
    result = _plan(project, "lab")
    assert result.returncode == 0, result.stderr
    # A diagnostic of the run, printed with the plan's other warnings (as the CLI lists it under Diagnostics).
    assert f"warning: {ALLOW_ALL_WARNING}" in result.stdout
    assert ALLOW_ALL_WARNING not in result.stderr
    outputs = json.loads((project / "o" / "lab" / "outputs.json").read_text())
    assert outputs["policy"]["mode"] == "databaseUnmanaged"
    assert outputs["policy"]["enforcedFromStart"] is False
    run = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs)
    assert _headscale_config(run)["policy"] == {"mode": "database", "path": ""}
    assert not _live(run), "nothing writes, nothing compares without API access"


def test_the_default_file_mode_prints_no_allow_all_warning(project_copy) -> None:
    project = project_copy()
    result = _plan(project, "hydra")
    assert result.returncode == 0, result.stderr
    assert "databaseUnmanaged" not in result.stderr + result.stdout


# ------------------------------------------------------------------------------------------ users it names


def _policy(tmp_path: Path, groups: str) -> Path:
    path = tmp_path / "users.hujson"
    path.write_text(
        "{\n"
        f'  "groups": {groups},\n'
        '  "tagOwners": {"tag:server": ["group:admins"]},\n'
        '  "acls": [{"action": "accept", "src": ["group:admins"], "dst": ["tag:server:22", "carol@example.com:*"]}],\n'
        "}\n"
    )
    return path


def test_a_policy_naming_a_user_the_tailnet_lacks_fails_the_plan_with_its_path(
    run_stack, lab_project, tmp_path
) -> None:
    """The installation guide's trap: the example users renamed in config, the base policy left as shipped."""
    policy = _policy(tmp_path, '{"group:admins": ["alice@", "dave@"]}')
    with pytest.raises(ConfigError) as caught:
        run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {policy}}}\n"))
    assert caught.value.problems == [
        f"headscale-ha:policy ({policy}) groups[\"group:admins\"][1]: 'dave@' is no user of tailnet.users (alice, "
        "bob, carol): Headscale matches it to nobody, so what it grants or owns reaches no one; add the user to "
        "tailnet.users or correct the token"
    ]


def test_make_plan_fails_on_a_policy_user_the_tailnet_lacks_and_names_the_path(lab_project, tmp_path) -> None:
    """The same through `make plan` as the user runs it: exit 1, the path on stderr, no rendered stack."""
    policy = _policy(tmp_path, '{"group:admins": ["alice@", "dave@"]}')
    project = lab_project(f"  headscale-ha:policy: {{file: {policy}}}\n")
    planned = _plan(project, "lab")
    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert f"headscale-ha:policy ({policy}) groups[\"group:admins\"][1]: 'dave@' is no user" in planned.stderr
    assert not (project / "o" / "lab").exists()


def test_a_router_tag_owner_the_tailnet_lacks_is_refused_by_its_key(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError) as caught:
        run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {routerTagOwner: 'erin@'}\n"))
    assert [problem.split(":", 2)[:2] for problem in caught.value.problems] == [
        ["headscale-ha", "policy.routerTagOwner"]
    ]
    assert "'erin@' is no user of tailnet.users" in caught.value.problems[0]


def test_users_by_name_and_email_pass_and_an_unnamed_user_is_a_lint(run_stack, lab_project, tmp_path) -> None:
    """alice@ by name, carol@example.com by e-mail (a destination with its ports); bob is named nowhere."""
    policy = _policy(tmp_path, '{"group:admins": ["alice@"]}')
    run = run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {policy}}}\n"))
    assert run.outputs["policy"]["lints"] == [
        f"tailnet.users[bob]: {policy} never names bob (the user gets only what autogroup:member grants) [unnamed-user]"
    ]


def test_with_oidc_an_unknown_user_is_a_lint_not_an_error(run_stack, lab_project, tmp_path) -> None:
    """An OIDC login creates its user at first login, so a token may name someone config does not list."""
    policy = _policy(tmp_path, '{"group:admins": ["alice@", "bob@", "dave@example.com"]}')
    oidc = "  headscale-ha:oidcClientSecret:\n    secure: v1:AAAA\n"
    headscale = (
        "  headscale-ha:headscale:\n    version: 0.29.2\n    image: ghcr.io/juanfont/headscale:0.29.2\n"
        "    oidc: {issuer: 'https://sso.lab.test', clientId: headscale, allowedDomains: [lab.test]}\n"
        "  headscale-ha:headplane: {oidcLogin: false}\n"
    )
    run = run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {policy}}}\n{headscale}{oidc}"))
    assert run.outputs["policy"]["lints"] == [
        f"headscale-ha:policy ({policy}) groups[\"group:admins\"][2]: 'dave@example.com' is no user of tailnet.users "
        "(alice, bob, carol): Headscale matches it to nobody, so what it grants or owns reaches no one; add the user "
        "to tailnet.users or correct the token (unless an OIDC login creates the user) [unknown-user]"
    ]
