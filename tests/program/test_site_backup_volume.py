"""The stack-level checks of BackupVolume: how the stacks wire it (their NFS source, the ConfigError of a bad
`backup.nfs`, what every pod mounts). The component's own behaviour is tested at its seam, in
tests/components/test_backup_volume.py."""

from __future__ import annotations

import pytest
import yaml

from headscale_ha.program.config import ConfigError
from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _with_nfs(project_copy, nfs: dict):
    project = project_copy()
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"]["nfs"] = nfs
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def test_the_stack_backs_up_to_its_configured_export_in_its_namespace(run_stack) -> None:
    """The stack's `backup.nfs` (Pulumi.yaml) reaches the volume, in the stack's namespace, both kept on destroy."""
    run = run_stack("hydra")
    (volume,) = _objects(run, "PersistentVolume")
    (claim,) = [c for c in _objects(run, "PersistentVolumeClaim") if c["metadata"]["name"].startswith("litestream-")]
    assert volume["spec"]["nfs"] == {"server": "nfs.internal.example.com", "path": "/export/headscale-backup"}
    assert volume["spec"]["claimRef"] == {"namespace": "headscale", "name": claim["metadata"]["name"]}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"] == f"headscale-{claim['metadata']['name']}"
    kept = [r for r in run.resources if r.name in ("hydra-backup-volume", "hydra-backup-claim")]
    assert len(kept) == 2
    assert all(r.retain_on_delete for r in kept)


def test_no_pod_mounts_nfs_inline(run_stack) -> None:
    for stack in ("hydra", "cosmos"):
        for workload in _objects(run_stack(stack), "Deployment"):
            assert all("nfs" not in v for v in workload["spec"]["template"]["spec"].get("volumes", []))


@pytest.mark.parametrize(
    ("nfs", "message"),
    [
        ({"server": "nfs.example.com"}, "server and path are required for the static nfs PersistentVolume"),
        ({"storageClass": "nfs-csi", "path": "/export/x"}, "storageClass provisions the volume"),
    ],
)
def test_the_backup_source_is_one_or_the_other(nfs: dict, message: str, run_stack, project_copy) -> None:
    with pytest.raises(ConfigError, match=rf"headscale-ha:backup\.nfs: .*{message}"):
        run_stack("hydra", project_dir=_with_nfs(project_copy, nfs))


def _backup_names(run: ProgramRun) -> tuple[str, ...]:
    claims = [c["metadata"]["name"] for c in _objects(run, "PersistentVolumeClaim")]
    volumes = [v["metadata"]["name"] for v in _objects(run, "PersistentVolume")]
    return (*sorted(c for c in claims if c.startswith("litestream-")), *volumes)


@pytest.mark.parametrize(
    "changed",
    [
        {"server": "nfs2.internal.example.com", "path": "/export/headscale-backup"},
        {"server": "nfs.internal.example.com", "path": "/export/elsewhere"},
        {"server": "nfs.internal.example.com", "path": "/export/headscale-backup", "size": "20Gi"},
        {"storageClass": "nfs-csi"},
    ],
)
def test_a_changed_source_gets_new_objects_not_a_replacement(changed: dict, run_stack, project_copy) -> None:
    """A claim's and a volume's source are immutable and both are retained: a replacement with the same name would
    collide with the kept object, so the names follow the source and every pod follows the names."""
    before = _backup_names(run_stack("hydra"))
    run = run_stack("hydra", project_dir=_with_nfs(project_copy, changed))
    after = _backup_names(run)
    assert not set(before) & set(after)
    claim = after[0]
    for workload in [*_objects(run, "Deployment")]:
        for volume in workload["spec"]["template"]["spec"]["volumes"]:
            if volume["name"] == "backup":
                assert volume["persistentVolumeClaim"]["claimName"] == claim
