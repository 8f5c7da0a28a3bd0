"""BackupVolume: the NFS export reaches the pods as a claim, bound to exactly one volume, kept on destroy.

At the component seam: each test builds one BackupVolume from hand-written args. The stack-level checks (the
stacks' NFS source, ConfigError from the stack config, what the pods mount) are in
tests/program/test_site_backup_volume.py.
"""

from __future__ import annotations

from headscale_ha.components.backup_volume import BackupVolume, BackupVolumeArgs
from headscale_ha.components.settings import Nfs
from tests.support.component_run import build_component
from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _lone_volume(nfs: Nfs) -> ProgramRun:
    """BackupVolume alone, in the caller's namespace, for the caller's application (no stack file)."""
    args = BackupVolumeArgs(namespace="apps", part_of="vaultwarden", nfs=nfs)
    return build_component(lambda: BackupVolume("vault-backup", args))


def test_a_static_nfs_volume_is_bound_to_the_claim_both_ways() -> None:
    run = _lone_volume(Nfs(server="nfs.example.org", path="/export/b"))
    (volume,) = _objects(run, "PersistentVolume")
    (claim,) = [c for c in _objects(run, "PersistentVolumeClaim") if c["metadata"]["name"].startswith("litestream-")]
    assert volume["spec"]["nfs"] == {"server": "nfs.example.org", "path": "/export/b"}
    # Pre-bound both ways with no class: no provisioner takes the claim, no other claim takes the volume.
    assert volume["spec"]["claimRef"] == {"namespace": "apps", "name": claim["metadata"]["name"]}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"] == f"apps-{claim['metadata']['name']}"
    assert volume["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
    assert volume["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    kept = [r for r in run.resources if r.name in ("vault-backup-volume", "vault-backup-claim")]
    assert len(kept) == 2
    assert all(r.retain_on_delete for r in kept)


def test_a_storage_class_provisions_the_claim_instead() -> None:
    run = _lone_volume(Nfs(storage_class="nfs-csi", size="20Gi"))
    assert _objects(run, "PersistentVolume") == []
    (claim,) = [c for c in _objects(run, "PersistentVolumeClaim") if c["metadata"]["name"].startswith("litestream-")]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "nfs-csi",
    }


def test_both_objects_name_the_callers_application() -> None:
    """`app.kubernetes.io/part-of` of the claim and the volume is the caller's (``part_of``), not headscale-ha's."""
    run = _lone_volume(Nfs(server="nfs.example.org", path="/export/b"))
    part_of = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["labels"]["app.kubernetes.io/part-of"]
        for o in run.kubernetes_objects()
    }
    assert set(part_of.values()) == {"vaultwarden"}, part_of
    assert len(part_of) == 2


def test_the_export_names_the_static_source_only() -> None:
    """What the static PersistentVolume is made from; a StorageClass's claim has none."""
    assert Nfs(server="nfs.example.org", path="/export/b").export == ("nfs.example.org", "/export/b")
    assert Nfs(storage_class="nfs-csi").export is None
