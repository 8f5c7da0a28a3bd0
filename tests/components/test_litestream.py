"""LitestreamBackup: config and script shipped to the pod, NFS volume, optional VolSync snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from components.backup_volume import claim_name
from components.litestream_config import restore_script
from components.settings import Nfs
from tests.test_main import _validate
from tools.harness import ProgramRun

#: The backup claim of the shared config's NFS source (Pulumi.yaml).
BACKUP_CLAIM = claim_name(Nfs(server="nfs.internal.example.com", path="/export/headscale-backup"))


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def test_each_application_gets_its_own_replica_directory(run_stack) -> None:
    run = run_stack("hydra")
    maps = {
        o["metadata"]["name"]: o for o in _objects(run, "ConfigMap") if o["metadata"]["name"].endswith("-litestream")
    }
    assert set(maps) == {"headscale-litestream", "headplane-litestream"}
    for app, config_map in maps.items():
        config = yaml.safe_load(config_map["data"]["litestream.yml"])
        text = yaml.safe_dump(config)
        assert f"/backup/{app.removesuffix('-litestream')}/replica" in text
        assert config_map["data"]["restore.sh"] == restore_script()


def test_volumes_that_hold_the_registry_are_retained_on_destroy(run_stack) -> None:
    run = run_stack("hydra")
    claims = [r for r in run.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert {r.inputs["metadata"]["name"] for r in claims} == {"headscale-data", "headplane-data", BACKUP_CLAIM}
    assert all(r.retain_on_delete for r in claims)


def test_volsync_snapshots_are_optional_and_per_volume(run_stack, project_copy) -> None:
    assert _objects(run_stack("hydra"), "ReplicationSource") == []
    project = project_copy()
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
    project = project_copy()
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"]["volsync"] = {"repository": "restic-config"}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    sources = _objects(run_stack("hydra", project_dir=project), "ReplicationSource")
    contexts = {json.dumps(s["spec"]["restic"]["moverSecurityContext"], sort_keys=True) for s in sources}
    assert len(sources) == 2
    assert len(contexts) == 1
    mover = json.loads(contexts.pop())
    admitted = _validate(shared_dir, _mover_pod_files(tmp_path / "now", mover))
    assert admitted.returncode == 0, admitted.stdout
    # What the stacks used to render: refused, so the second backup would silently never run.
    before = {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532}
    refused = _validate(shared_dir, _mover_pod_files(tmp_path / "before", before))
    assert refused.returncode == 1
    assert "runAsNonRoot" in refused.stdout
    assert "seccompProfile" in refused.stdout
