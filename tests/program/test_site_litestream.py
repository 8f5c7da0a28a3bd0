"""LitestreamBackup as the stacks render it for Headscale and Headplane: the volumes that hold the registry kept
(and retained) or disposable, VolSync snapshots and their mover pods under `restricted`, the `allowEmptyStart` and
`backup.auth` overrides from the stack's config, and the optional witness declared where the site reads it. The
component and the applications it serves, built alone, are tested at the seam in tests/components/test_litestream.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.settings import BackupSettings, Nfs
from headscale_ha.program.config import StackConfig, parse_stack_config
from headscale_ha.program.externals import optional_references
from tests.support.manifest_validator import validate
from tests.support.seam_litestream import restore_of as _restore
from tests.support.site_objects import deployment_pod as _deployment_pod
from tests.support.site_objects import objects_of as _objects
from tools.plan import PLACEHOLDERS
from tools.stack_files import read_stack_settings
from tools.wiring import check_wiring

#: The backup claim of the shared config's NFS source (Pulumi.yaml).
BACKUP_CLAIM = claim_name(Nfs(server="nfs.internal.example.com", path="/export/headscale-backup"))


def _persistent(project: Path) -> Path:
    """The project with `backup.local.storage: persistent` (the shipped default is disposable)."""
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"]["local"] = {"storage": "persistent"}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def test_volumes_that_hold_the_registry_are_retained_on_destroy(run_stack, project_copy) -> None:
    run = run_stack("hydra", project_dir=_persistent(project_copy()))
    claims = [r for r in run.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert {r.inputs["metadata"]["name"] for r in claims} == {"headscale-data", "headplane-data", BACKUP_CLAIM}
    assert all(r.retain_on_delete for r in claims)


def test_disposable_storage_keeps_no_claim_and_restores_into_the_pod_volume(run_stack) -> None:
    run = run_stack("hydra")
    claims = [r for r in run.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert {r.inputs["metadata"]["name"] for r in claims} == {BACKUP_CLAIM}, "only the NFS claim is kept"
    for app, size in (("headscale", "1Gi"), ("headplane", "256Mi")):
        pod = _deployment_pod(run, app)
        (data,) = [v for v in pod["volumes"] if v["name"] == "data"]
        assert data == {"name": "data", "emptyDir": {"sizeLimit": size}}
        restore = pod["initContainers"][0]
        assert restore["name"] == "restore"
        assert any(mount["name"] == "data" for mount in restore["volumeMounts"]), "it restores into that volume"
        # Sized for the restore (more than a core), not the sidecar's 200m.
        assert restore["resources"]["limits"]["cpu"] == "2"
        sidecar = next(c for c in pod["initContainers"] if c["name"] == "litestream")
        assert sidecar["resources"]["limits"]["cpu"] == "200m"


def test_volsync_snapshots_are_optional_and_per_volume(run_stack, project_copy) -> None:
    assert _objects(run_stack("hydra"), "ReplicationSource") == []
    project = _persistent(project_copy())
    text = (
        (project / "Pulumi.yaml")
        .read_text()
        .replace(
            "        image: docker.io/litestream/litestream:0.5.17\n",
            "        image: docker.io/litestream/litestream:0.5.17\n"
            "      volsync:\n        repository: restic-config\n",
        )
    )
    (project / "Pulumi.yaml").write_text(text)
    sources = {
        o["metadata"]["name"]: o["spec"] for o in _objects(run_stack("hydra", project_dir=project), "ReplicationSource")
    }
    assert set(sources) == {"headscale-data", "headplane-data"}
    assert sources["headscale-data"]["sourcePVC"] == "headscale-data"
    assert sources["headscale-data"]["restic"]["repository"] == "restic-config"
    assert sources["headscale-data"]["restic"]["retain"] == {"daily": 7, "weekly": 4}


#: VolSync runs an unprivileged mover (no `volsync.backube/privileged-movers` on the namespace) with this container
#: security context and the ReplicationSource's moverSecurityContext as the pod's: admission sees both.
VOLSYNC_MOVER_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
}


def _mover_pod_files(tmp_path: Path, pod_security: dict) -> list[Path]:
    tmp_path.mkdir()
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "headscale", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "volsync-src-headscale-data", "namespace": "headscale"},
        "spec": {
            "securityContext": pod_security,
            "containers": [
                {
                    "name": "restic",
                    "image": "quay.io/backube/volsync:0.11.0",
                    "securityContext": VOLSYNC_MOVER_CONTAINER,
                }
            ],
        },
    }
    files = []
    for index, document in enumerate((namespace, pod)):
        path = tmp_path / f"{index}.yaml"
        path.write_text(yaml.safe_dump(document))
        files.append(path)
    return files


def test_volsync_mover_pods_are_admitted_under_restricted(run_stack, project_copy, shared_dir, tmp_path) -> None:
    project = _persistent(project_copy())
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"]["volsync"] = {"repository": "restic-config"}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    sources = _objects(run_stack("hydra", project_dir=project), "ReplicationSource")
    contexts = {json.dumps(s["spec"]["restic"]["moverSecurityContext"], sort_keys=True) for s in sources}
    assert len(sources) == 2
    assert len(contexts) == 1
    mover = json.loads(contexts.pop())
    admitted = validate(shared_dir, _mover_pod_files(tmp_path / "now", mover))
    assert admitted.returncode == 0, admitted.stdout
    # What the stacks used to render: refused, so the second backup would silently never run.
    before = {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532}
    refused = validate(shared_dir, _mover_pod_files(tmp_path / "before", before))
    assert refused.returncode == 1
    assert "runAsNonRoot" in refused.stdout
    assert "seccompProfile" in refused.stdout


def _with_headscale(project: Path, **values: object) -> Path:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["headscale"]["value"].update(values)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def _stack_config(project: Path, stack: str) -> StackConfig:
    settings = read_stack_settings(project, stack, placeholders=PLACEHOLDERS, assume_secrets=())
    prefix = f"{settings.project}:"
    raw = {key.removeprefix(prefix): value for key, value in settings.config.items() if key.startswith(prefix)}
    secret = {key.removeprefix(prefix) for key in settings.secret_keys if key.startswith(prefix)}
    return parse_stack_config(raw, stack=stack, secret_keys=secret)


def test_allow_empty_start_reaches_both_restores(run_stack, project_copy) -> None:
    run = run_stack("hydra", project_dir=_with_headscale(project_copy(), allowEmptyStart="2031-02-03"))
    for app in ("headscale", "headplane"):
        _, restore = _restore(run, app)
        assert {e["name"]: e.get("value") for e in restore["env"]}["ALLOW_EMPTY_START"] == "2031-02-03"


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_the_optional_witness_is_declared_where_it_is_read(stack: str, run_stack, project_copy) -> None:
    project = project_copy()
    run = run_stack(stack, project_dir=project)
    config = _stack_config(project, stack)
    declared = optional_references(config)
    findings = [str(f) for f in check_wiring(run.kubernetes_objects(), optional_refs=declared) if "-served" in str(f)]
    assert findings == []
    witnesses = {(ref.workload, ref.name) for ref in declared if ref.name.endswith("-served")}
    if stack == "hydra":
        assert witnesses == {("Deployment/headscale", "headscale-served"), ("Deployment/headplane", "headplane-served")}
        undeclared = [r for r in declared if not r.name.endswith("-served")]
        findings = [str(f) for f in check_wiring(run.kubernetes_objects(), optional_refs=undeclared)]
        assert any("headscale-served" in f and "not declared" in f for f in findings), findings
    else:
        assert witnesses == set()


def test_the_auth_overrides_reach_the_restore_only_as_dates(run_stack, project_copy) -> None:
    project = project_copy()
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"]["auth"] = {"allowUnsigned": "2026-12-01", "maxAge": "6h"}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    pod = _deployment_pod(run_stack("hydra", project_dir=project), "headscale")
    env = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert env["ALLOW_UNSIGNED_RESTORE"] == "2026-12-01"
    assert env["MAX_REPLICA_AGE_SECONDS"] == str(6 * 3600)
    assert "ALLOW_STALE_RESTORE" not in env
    with pytest.raises(ValidationError, match="is not a date"):
        BackupSettings.model_validate({"auth": {"allowStale": "tomorrow"}})
