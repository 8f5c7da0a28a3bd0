"""The package's BackupVolume: plain inputs in, the Python component's resources out, bad inputs named."""

from __future__ import annotations

import pytest

from headscale_ha.components import backup_volume
from headscale_ha.components.settings import Nfs
from headscale_ha.package.backup_volume import BackupVolume
from tests.support.component_run import build_component, refused
from tests.support.component_tree import subtree

STATIC = {"server": "nas.lan", "path": "/export/tailnet", "size": "20Gi"}


def test_registers_what_the_python_component_registers_one_level_down():
    package = build_component(
        lambda: BackupVolume("backups", {"namespace": "tailnet", "part_of": "vault", "nfs": STATIC})
    )
    python = build_component(
        lambda: backup_volume.BackupVolume(
            "backups",
            backup_volume.BackupVolumeArgs(namespace="tailnet", part_of="vault", nfs=Nfs(**STATIC)),
        )
    )
    ours = subtree(package.resources, "headscale-ha:index:BackupVolume", "backups")
    child = [entry for entry in ours if "/" not in entry[0]]
    assert [entry[:2] for entry in child] == [("headscale-ha:backup:BackupVolume", "backups")]
    below = [(path.split("/", 1)[1], name, inputs) for path, name, inputs in ours if "/" in path]
    assert below == subtree(python.resources, "headscale-ha:backup:BackupVolume", "backups")
    assert [name for _, name, _ in below] == [
        "backups-volume",
        "backups-claim",
    ]  # sorted by type: PersistentVolume first


def test_a_storage_class_provisions_the_claim_and_no_volume_is_made():
    run = build_component(
        lambda: BackupVolume("b", {"namespace": "t", "part_of": "x", "nfs": {"storage_class": "nfs-csi"}})
    )
    assert [r.type for r in run.resources] == [
        "headscale-ha:index:BackupVolume",
        "headscale-ha:backup:BackupVolume",
        "kubernetes:core/v1:PersistentVolumeClaim",
    ]


@pytest.mark.parametrize(
    ("nfs", "path", "message"),
    [
        ({"server": "nas.lan"}, "nfs", "server and path are required"),
        ({"server": "nas.lan", "path": "/x", "size": "lots"}, "nfs.size", "'lots'"),
        ({"server": "nas.lan", "path": "/x", "storage_class": "c"}, "nfs", "leave server and path"),
        ({"server": "nas.lan", "path": "/x", "colour": "red"}, "nfs.colour", "is not an input"),
    ],
)
def test_a_bad_input_is_refused_at_its_schema_path_before_anything_is_registered(nfs, path, message):
    error = refused(lambda: BackupVolume("b", {"namespace": "t", "part_of": "x", "nfs": nfs}))
    assert error.property_path == path
    assert message in error.reason
