"""BackupVolume as the component package exposes it: the backup claim on NFS, from plain inputs."""

from typing import TypedDict

import pulumi

from headscale_ha.components import backup_volume
from headscale_ha.components.settings import Nfs
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import settings_of


class BackupVolumeArgs(TypedDict):
    """Where the claim lives and which export (or StorageClass) backs it."""

    namespace: str
    """Namespace of the claim: the applications that mount it run there."""
    part_of: str
    """The application the backups belong to: `app.kubernetes.io/part-of` of the claim and its volume."""
    nfs: types.Nfs
    """The source: a static NFS server and path, or a StorageClass that provisions the claim; and its size."""


class BackupVolume(pulumi.ComponentResource):
    """A ReadWriteMany claim on the NFS export (and its static PersistentVolume), retained on delete: deleting the
    component, the stack or a replacement never takes the backup directory with it."""

    claim_name: pulumi.Output[str]
    """The claim's name: what a pod's volume refers to (mount it with `subPath: <app>`)."""
    volume_name: pulumi.Output[str] | None
    """The static PersistentVolume's name; absent when a StorageClass provisions the claim."""

    @staticmethod
    def component_args(
        args: BackupVolumeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> backup_volume.BackupVolumeArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        return backup_volume.BackupVolumeArgs(
            namespace=args["namespace"], part_of=args["part_of"], nfs=settings_of(Nfs, args["nfs"], "nfs")
        )

    def __init__(self, name: str, args: BackupVolumeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:BackupVolume", name, None, opts)
        volume = backup_volume.BackupVolume(name, component_args, child_options(self, opts))
        expose(self, {"claim_name": volume.claim_name, "volume_name": volume.volume_name})
