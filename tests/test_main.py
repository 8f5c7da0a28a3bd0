"""The whole program (``__main__.py`` via runpy) for every stack, and the offline plan around it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offline.harness import PROJECT_DIR
from offline.plan import main as plan_main
from offline.plan import plan_stack, write_rendered
from offline.stack_files import list_stacks

LAB_SITE = {"name": "lab", "gatewayIp": "172.29.250.10", "lbPool": "172.29.250.0/28", "routes": ["10.246.0.0/16"]}


def _validate(shared_dir: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    validator = shared_dir / "tools" / "validate_manifests.py"
    return subprocess.run(
        [sys.executable, str(validator), *map(str, files)], capture_output=True, text=True, check=False
    )


def _add_site(project: Path, site: dict) -> None:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["tailnet"]["value"]["sites"].append(site)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def _plan_subprocess(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offline.plan", "--project-dir", str(project), "--out", str(project / "out"), *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_DIR,
        check=False,
    )


@pytest.mark.parametrize("stack", list_stacks(PROJECT_DIR))
def test_every_stack_renders_manifests_that_validate(stack: str, shared_dir: Path, tmp_path: Path) -> None:
    run = plan_stack(stack)
    files = [f for f in write_rendered(run, tmp_path / stack) if f.suffix == ".yaml"]
    assert len(files) == len(run.kubernetes_objects()) > 0
    result = _validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"{len(files)} passed, 0 failed"


def test_validator_catches_a_broken_manifest(shared_dir: Path, tmp_path: Path) -> None:
    """The check above can fail: a namespace with a bad field does not pass."""
    files = [f for f in write_rendered(plan_stack("hydra"), tmp_path) if f.suffix == ".yaml"]
    broken = yaml.safe_load(files[0].read_text())
    broken["metadata"]["nmae"] = "typo"
    files[0].write_text(yaml.safe_dump(broken))
    result = _validate(shared_dir, files)
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
        lab="config:\n  headscale-ha:role: standby\n  headscale-ha:identityFrom: org/headscale-ha/hydra\n"
        "  headscale-ha:cluster: {nodes: 5, apiServer: {host: 10.30.0.10}}\n"
    )
    _add_site(project, LAB_SITE)
    result = _plan_subprocess(project)
    assert result.returncode == 0, result.stderr
    outputs = json.loads((project / "out" / "lab" / "outputs.json").read_text())
    assert outputs["endpoints"]["dnsZone"] == "lab.tn.internal.example.com"
    assert outputs["endpoints"]["gatewayIp"] == "172.29.250.10"
    assert {p.name for p in (project / "out").iterdir()} == {"cosmos", "hydra", "lab"}


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
  headscale-ha:networkPolicy: {ingressNamespaces: [ingress-nginx], ingressCidrs: [10.0.0.0/8]}
  headscale-ha:oidcClientSecret:
    secure: v1:AAAA
  headscale-ha:headplaneApiKey:
    secure: v1:BBBB
  headscale-ha:kubeconfig:
    secure: v1:CCCC
"""


@pytest.mark.parametrize("route", ["gateway", "ingress"])
def test_optional_features_render_manifests_that_validate(route: str, shared_dir: Path, project_copy) -> None:
    project = project_copy(lab=KITCHEN_SINK.replace("route: ingress", f"route: {route}"))
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    config = document["config"]
    config["backup"]["value"]["volsync"] = {"repository": "restic-config", "volumeSnapshotClass": "ceph"}
    config["headscale"]["value"]["oidc"] = {"issuer": "https://id.example.com", "clientId": "headscale"}
    config["headscale"]["value"]["derp"] = {"embedded": True}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    run = plan_stack("lab", project_dir=project)
    files = [f for f in write_rendered(run, project / "out") if f.suffix == ".yaml"]
    kinds = {yaml.safe_load(f.read_text())["kind"] for f in files}
    assert {"ReplicationSource", "Certificate", "NetworkPolicy"} <= kinds
    assert ("Ingress" in kinds) == (route == "ingress")
    result = _validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    rendered = "".join(f.read_text() for f in files) + (project / "out" / "outputs.json").read_text()
    assert "offline placeholder" not in rendered


@pytest.mark.parametrize(("stack", "expected"), [("hydra", 6), ("cosmos", 1)])
def test_plan_with_an_assumed_api_key_shows_the_provider_resources(
    stack: str, expected: int, shared_dir: Path, tmp_path: Path
) -> None:
    run = plan_stack(stack, assume_secrets=["bootstrapApiKey"])
    dynamic = [r for r in run.resources if r.type.startswith("pulumi-python:dynamic/headscale:")]
    assert len(dynamic) == expected
    assert "nextSteps" not in run.outputs
    assert "nextSteps" in plan_stack(stack).outputs
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    result = _validate(shared_dir, files)
    assert result.returncode == 0, result.stdout
    assert "offline placeholder" not in "".join(f.read_text() for f in files)
