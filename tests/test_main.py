"""The whole program (``__main__.py`` via runpy) for every stack, and the offline plan around it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from headscale_ha.program.externals import external_objects, optional_references
from tests.support.manifest_validator import validate
from tests.support.option_sets import ALL_SETS, option_set_config, option_set_run
from tools.harness import PROJECT_DIR, RegisteredResource
from tools.plan import main as plan_main
from tools.plan import plan_stack, write_rendered
from tools.stack_files import list_stacks
from tools.wiring import check_wiring

LAB_SITE = {"name": "lab", "gatewayIp": "172.29.250.10", "lbPool": "172.29.250.0/28", "routes": ["10.246.0.0/16"]}


def _add_site(project: Path, site: dict) -> None:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["tailnet"]["value"]["sites"].append(site)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def _plan_subprocess(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.plan", "--project-dir", str(project), "--out", str(project / "out"), *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_DIR,
        check=False,
    )


@pytest.mark.parametrize("stack", list_stacks(PROJECT_DIR))
def test_every_stack_renders_manifests_thatvalidate(
    stack: str, shared_dir: Path, tmp_path: Path, stack_outputs
) -> None:
    run = plan_stack(stack, stack_outputs=stack_outputs)
    files = [f for f in write_rendered(run, tmp_path / stack) if f.suffix == ".yaml"]
    assert len(files) == len(run.kubernetes_objects()) > 0
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"{len(files)} passed, 0 failed"


def test_validator_catches_a_broken_manifest(shared_dir: Path, tmp_path: Path, stack_outputs) -> None:
    """The check above can fail: a namespace with a bad field does not pass."""
    files = [
        f for f in write_rendered(plan_stack("hydra", stack_outputs=stack_outputs), tmp_path) if f.suffix == ".yaml"
    ]
    broken = yaml.safe_load(files[0].read_text())
    broken["metadata"]["nmae"] = "typo"
    files[0].write_text(yaml.safe_dump(broken))
    result = validate(shared_dir, files)
    assert result.returncode == 1
    assert "nmae" in result.stdout


def test_plan_prints_the_tree_and_writes_every_stack(capsys, tmp_path: Path) -> None:
    assert plan_main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for stack in ("hydra", "cosmos"):
        assert f"stack {stack} of headscale-ha: " in printed
        assert f"headscale-ha:site:TailnetSite  {stack}" in printed
        assert json.loads((tmp_path / stack / "outputs.json").read_text())["endpoints"]["site"] == stack
        assert (tmp_path / stack / "_cluster" / "namespace-headscale.yaml").is_file()


def test_plan_replaces_stale_files(tmp_path: Path) -> None:
    stale = tmp_path / "hydra" / "old" / "deployment-gone.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("kind: Deployment\n")
    assert plan_main(["--stack", "hydra", "--out", str(tmp_path)]) == 0
    assert not stale.exists()


def test_a_new_stack_file_needs_no_code_change(project_copy) -> None:
    project = project_copy(
        lab="config:\n  headscale-ha:role: standby\n  headscale-ha:cluster: {nodes: 5, apiServer: {host: 10.30.0.10}}\n"
        "  headscale-ha:networkPolicy: {apiServerCidrs: [10.30.0.0/24]}\n"
    )
    _add_site(project, LAB_SITE)
    result = _plan_subprocess(project)
    assert result.returncode == 0, result.stderr
    outputs = json.loads((project / "out" / "lab" / "outputs.json").read_text())
    assert outputs["endpoints"]["dnsZone"] == "lab.tn.internal.example.com"
    assert outputs["endpoints"]["gatewayIp"] == "172.29.250.10"
    assert {p.name for p in (project / "out").iterdir()} == {"cosmos", "hydra", "lab", "identity"}


def test_misspelt_key_in_a_stack_file_fails_the_plan(project_copy) -> None:
    project = project_copy()
    text = (project / "Pulumi.hydra.yaml").read_text().replace("storageClass:", "storageClas:")
    (project / "Pulumi.hydra.yaml").write_text(text)
    result = _plan_subprocess(project, "--stack", "hydra")
    assert result.returncode == 1
    assert "headscale-ha:cluster.storageClas: unknown key; did you mean 'storageClass'?" in result.stderr
    assert not (project / "out" / "hydra").exists(), "nothing is rendered from a bad config"


def test_latest_tag_in_a_stack_file_fails_the_plan(project_copy) -> None:
    project = project_copy()
    with (project / "Pulumi.cosmos.yaml").open("a") as stack_file:
        stack_file.write("  headscale-ha:headplane:\n    image: ghcr.io/tale/headplane:latest\n")
    result = _plan_subprocess(project)
    assert result.returncode == 1
    assert "headscale-ha:headplane.image: uses the moving tag 'latest'" in result.stderr
    assert (project / "out" / "hydra" / "outputs.json").is_file(), "the other stacks are still planned"


def test_unreadable_stack_file_exits_2(project_copy) -> None:
    project = project_copy(broken="config: [unclosed\n")
    result = _plan_subprocess(project, "--stack", "broken")
    assert result.returncode == 2
    assert "Pulumi.broken.yaml: not valid YAML" in result.stderr


KITCHEN_SINK = """\
config:
  headscale-ha:role: active
  headscale-ha:cluster: {name: hydra, nodes: 3, storageClass: ceph-block, apiServer: {host: 10.10.0.10}}
  headscale-ha:endpoint: {route: ingress, ingressClass: nginx, tlsIssuer: internal-ca, tlsIssuerKind: Issuer}
  headscale-ha:networkPolicy:
    {ingressNamespaces: [ingress-nginx], ingressCidrs: [10.0.0.0/8], apiServerCidrs: [10.10.0.0/24]}
  headscale-ha:oidcClientSecret:
    secure: v1:AAAA
  headscale-ha:headplaneApiKey:
    secure: v1:BBBB
  headscale-ha:kubeconfig:
    secure: v1:CCCC
"""


@pytest.mark.parametrize("route", ["gateway", "ingress"])
def test_optional_features_render_manifests_thatvalidate(
    route: str, shared_dir: Path, project_copy, stack_outputs
) -> None:
    project = project_copy(lab=KITCHEN_SINK.replace("route: ingress", f"route: {route}"))
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    config = document["config"]
    config["backup"]["value"]["volsync"] = {"repository": "restic-config", "volumeSnapshotClass": "ceph"}
    config["backup"]["value"]["local"] = {"storage": "persistent"}
    config["headscale"]["value"]["oidc"] = {
        "issuer": "https://id.example.com",
        "clientId": "headscale",
        "allowedDomains": ["example.com"],
    }
    config["headscale"]["value"]["derp"] = {"embedded": True}
    config.setdefault("headplane", {"value": {}})["value"]["oidcLogin"] = True  # Headplane's OIDC login, chosen
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    run = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs)
    files = [f for f in write_rendered(run, project / "out") if f.suffix == ".yaml"]
    kinds = {yaml.safe_load(f.read_text())["kind"] for f in files}
    assert {"ReplicationSource", "Certificate", "NetworkPolicy"} <= kinds
    assert ("Ingress" in kinds) == (route == "ingress")
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    rendered = "".join(f.read_text() for f in files) + (project / "out" / "outputs.json").read_text()
    assert "offline placeholder" not in rendered


@pytest.mark.parametrize(("stack", "expected"), [("hydra", 6), ("cosmos", 1)])
def test_plan_with_an_assumed_api_key_shows_the_provider_resources(
    stack: str, expected: int, shared_dir: Path, tmp_path: Path, stack_outputs
) -> None:
    run = plan_stack(stack, assume_secrets=["bootstrapApiKey"], stack_outputs=stack_outputs)
    dynamic = [r for r in run.resources if r.type.startswith("pulumi-python:dynamic/headscale:")]
    assert len(dynamic) == expected
    assert "nextSteps" not in run.outputs
    assert "nextSteps" in plan_stack(stack, stack_outputs=stack_outputs).outputs
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout
    assert "offline placeholder" not in "".join(f.read_text() for f in files)


# --------------------------------------------------------------------------- what a cluster admits and keeps


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_every_option_set_is_admitted_by_pod_security(
    option_set: str, shared_dir: Path, project_copy, tmp_path: Path, stack_outputs
) -> None:
    run = option_set_run(option_set, project_copy, stack_outputs)
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    namespaces = [yaml.safe_load(f.read_text()) for f in files if f.name.startswith("namespace-")]
    assert namespaces, "admission is only emulated for namespaces among the files"
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_admission_is_really_checked(shared_dir: Path, tmp_path: Path, stack_outputs) -> None:
    """The check above can fail: an inline nfs volume (what the stacks used to render) is refused."""
    files = [
        f for f in write_rendered(plan_stack("hydra", stack_outputs=stack_outputs), tmp_path) if f.suffix == ".yaml"
    ]
    path = next(f for f in files if f.name == "deployment-headscale.yaml")
    deployment = yaml.safe_load(path.read_text())
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    backup = next(v for v in volumes if v["name"] == "backup")
    backup.pop("persistentVolumeClaim")
    backup["nfs"] = {"server": "nfs.internal.example.com", "path": "/export/headscale-backup"}
    path.write_text(yaml.safe_dump(deployment))
    result = validate(shared_dir, files)
    assert result.returncode == 1
    assert "volume 'backup' of type nfs is forbidden by the restricted level" in result.stdout


def _stateful(resource: RegisteredResource) -> str | None:
    """Why a resource must survive `pulumi destroy`, or None when losing it costs nothing that cannot be recreated."""
    kind = resource.inputs.get("kind") if resource.is_kubernetes_object else None
    name = (resource.inputs.get("metadata") or {}).get("name", "") if resource.is_kubernetes_object else ""
    if resource.type == "random:index/randomBytes:RandomBytes":
        return "key material that exists only in the Pulumi state"
    if kind == "Namespace":
        return "deleting a namespace deletes every claim and Secret inside it"
    if kind in ("PersistentVolumeClaim", "PersistentVolume"):
        return "a database or its backup"
    router_state = re.fullmatch(r"subnet-router-\d+", name) is not None  # not `subnet-router-authkey-N`
    if kind == "Secret" and (name == "headscale-identity" or router_state):
        return "node private keys"
    if kind == "Cluster":
        return "the PostgreSQL database (CloudNativePG deletes its volumes with it)"
    if kind == "ConfigMap" and name.endswith("-served"):
        return "the witness that the site has served: without it, losing both volumes looks like a first start"
    return None


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_stateful_resources_survive_destroy(option_set: str, project_copy, stack_outputs) -> None:
    run = option_set_run(option_set, project_copy, stack_outputs)
    stateful = [(r, why) for r in run.resources if (why := _stateful(r))]
    assert len(stateful) >= 4
    unprotected = [f"{r.type} {r.name} ({why})" for r, why in stateful if not (r.protect or r.retain_on_delete)]
    assert unprotected == []
    # State-only key material cannot be "retained": it is protected, so `destroy` refuses until unprotected.
    assert all(r.protect for r, _ in stateful if r.type.startswith("random:"))


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_the_router_key_secret_and_the_routers_meet_in_one_namespace(
    option_set: str, project_copy, stack_outputs
) -> None:
    """Each replica finds its own key (file `authkey`) in its own Secret, mounted in its namespace; every key the
    stack mints for the routers is single-use, so nothing reusable carries the route-approving tag."""
    run = option_set_run(option_set, project_copy, stack_outputs)
    objects = run.kubernetes_objects()
    routers = [o for o in objects if o["kind"] == "StatefulSet"]
    assert [r["metadata"]["name"] for r in routers] == [f"subnet-router-{n}" for n in range(len(routers))]
    minted = [r for r in run.resources if r.type.endswith(":PreAuthKey")]
    assert all(r.inputs["reusable"] is False and r.inputs["recreateIfInvalid"] == "always" for r in minted)
    assert len(minted) in (0, len(routers))
    for ordinal, router in enumerate(routers):
        namespace = router["metadata"]["namespace"]
        pod = router["spec"]["template"]["spec"]
        assert all(e["name"] != "TS_AUTHKEY" for c in pod["containers"] for e in c.get("env", [])), "no key in spec"
        (volume,) = [v["secret"] for v in pod["volumes"] if "secret" in v]
        assert volume["secretName"] == f"subnet-router-authkey-{ordinal}"
        keys = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == volume["secretName"]]
        if minted or option_set == "sqlite-kernel-routers-router-key":
            assert [(k["metadata"]["namespace"], set(k["stringData"])) for k in keys] == [(namespace, {"authkey"})]
            assert "pulumi.com/skipAwait" not in router["metadata"].get("annotations", {})
        else:
            assert keys == []
            # No key yet: Pulumi does not wait for routers that cannot become ready, and the stack says what to set.
            assert router["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
            assert any("routerAuthKeys" in step for step in run.outputs["nextSteps"])


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_every_reference_resolves_in_the_rendered_set_or_to_a_documented_external(
    option_set: str, project_copy, stack_outputs
) -> None:
    """What the kubelet and the controllers resolve: Secrets, keys, claims, selectors, ports, backends, roles."""
    run = option_set_run(option_set, project_copy, stack_outputs)
    config = option_set_config(option_set, project_copy)
    externals = external_objects(config)
    findings = check_wiring(run.kubernetes_objects(), externals=externals, optional_refs=optional_references(config))
    assert [str(f) for f in findings] == []
    # Each documented external is really referenced (the list says what a user must provide, nothing more).
    for external in externals:
        unlisted = check_wiring(run.kubernetes_objects(), optional_refs=optional_references(config))
        assert any(f"'{external.name}'" in f.message for f in unlisted), external


def test_an_undeclared_optional_reference_is_a_finding(project_copy, stack_outputs) -> None:
    """The check above can fail: without the program's declaration, the routers' optional key is reported."""
    run = option_set_run("cosmos", project_copy, stack_outputs)
    (finding,) = check_wiring(run.kubernetes_objects())
    assert finding.obj == "StatefulSet/tailnet-gateway/subnet-router-0"
    assert "subnet-router-authkey-0" in finding.message
