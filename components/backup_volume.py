"""BackupVolume: the NFS export of the Litestream replicas, as a claim the `restricted` Pod Security level admits.

Pods never mount `nfs:` inline (the `restricted` level refuses that volume type). The export reaches them as a
PersistentVolumeClaim: either bound to a static `nfs` PersistentVolume this component creates (pre-bound both
ways, so no other claim can take it), or provisioned by a StorageClass the user names (e.g. csi-driver-nfs).
Each application mounts its own sub-directory of the claim (`subPath: <app>`).

Both objects are named after their source (server, path, class, size): most of a claim's and a volume's spec is
immutable, and both are retained on delete, so a changed source gets new objects beside the kept old ones rather
than a replacement that would collide with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import PersistentVolumeClaimSpecArgsDict

from headscale_ha.components.pod import checksum, kept, labels
from headscale_ha.components.settings import Nfs

CLAIM_PREFIX = "litestream-backup"


def claim_name(nfs: Nfs) -> str:
    """The backup claim of this source: `litestream-backup-<8 hex>`."""
    source = checksum(nfs.storage_class or "", nfs.server or "", nfs.path or "", nfs.size)
    return f"{CLAIM_PREFIX}-{source[:8]}"


def volume_name(namespace: str, nfs: Nfs) -> str:
    """PersistentVolumes are cluster-scoped: the namespace keeps two installations on one cluster apart."""
    return f"{namespace}-{claim_name(nfs)}"


@dataclass(frozen=True, kw_only=True)
class BackupVolumeArgs:
    """Where the claim lives and which export (or StorageClass) backs it."""

    namespace: str  # namespace of the claim: the applications that mount it run there
    #: The application the backups belong to, the caller's: `app.kubernetes.io/part-of` of the claim and volume.
    part_of: str
    nfs: Nfs  # the source: a static NFS server and path, or a StorageClass that provisions the claim; its size


class BackupVolume(pulumi.ComponentResource):
    """The backup claim (and its static PersistentVolume); both survive `pulumi destroy` and a replacement.

    Outputs (registered):
    - ``claim``: `<namespace>/<claim>`, the claim the applications mount (``subPath: <app>``);
    - ``claimName`` [attribute claim_name]: the claim's name alone, what a pod's volume refers to;
    - ``volume`` [attribute volume_name]: the static PersistentVolume's name, or None when a StorageClass provisions.
    """

    claim: k8s.core.v1.PersistentVolumeClaim
    volume: k8s.core.v1.PersistentVolume | None
    claim_name: str
    volume_name: str | None

    def __init__(self, name: str, args: BackupVolumeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:backup:BackupVolume", name, None, opts)
        nfs = args.nfs
        meta_labels = labels("litestream", "backup", args.part_of)
        # Retained: deleting the claim or the volume object must never be how the backup directory goes away.
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        self.claim_name = claim = claim_name(nfs)
        self.volume = None
        claim_spec: PersistentVolumeClaimSpecArgsDict = {
            "access_modes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": nfs.size}},
        }
        export = nfs.export
        if export is None:
            claim_spec["storage_class_name"] = nfs.storage_class
        else:
            server, path = export
            self.volume = k8s.core.v1.PersistentVolume(
                f"{name}-volume",
                metadata=kept({"name": volume_name(args.namespace, nfs), "labels": meta_labels}),
                spec={
                    "capacity": {"storage": nfs.size},
                    "access_modes": ["ReadWriteMany"],
                    "persistent_volume_reclaim_policy": "Retain",
                    "storage_class_name": "",
                    "claim_ref": {"namespace": args.namespace, "name": claim},
                    "nfs": {"server": server, "path": path},
                },
                opts=keep,
            )
            claim_spec["storage_class_name"] = ""
            claim_spec["volume_name"] = volume_name(args.namespace, nfs)
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata=kept({"name": claim, "namespace": args.namespace, "labels": meta_labels}),
            spec=claim_spec,
            opts=pulumi.ResourceOptions.merge(
                keep, pulumi.ResourceOptions(depends_on=[self.volume] if self.volume else [])
            ),
        )
        self.volume_name = volume_name(args.namespace, nfs) if self.volume else None
        self.register_outputs({"claim": f"{args.namespace}/{claim}", "claimName": claim, "volume": self.volume_name})
