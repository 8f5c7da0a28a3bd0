"""LitestreamBackup: config and script shipped to the pod, NFS volume, optional VolSync snapshots."""

from __future__ import annotations

import yaml

from components.litestream_config import restore_script
from offline.harness import ProgramRun


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
    assert {r.inputs["metadata"]["name"] for r in claims} == {"headscale-data", "headplane-data", "litestream-backup"}
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
