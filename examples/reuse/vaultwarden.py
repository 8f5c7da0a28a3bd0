"""Vaultwarden with headscale-ha's backup components: restore before serving, replicate while serving."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.core.v1 import ContainerArgsDict, PodSpecArgsDict

from headscale_ha.components.backup_volume import BackupVolume, BackupVolumeArgs
from headscale_ha.components.litestream import LitestreamBackup, LitestreamBackupArgs
from headscale_ha.components.pod import Meta, container_security, labels, pod_security, resources
from headscale_ha.components.settings import BackupSettings, ComputeResources, Nfs, ResourceAmounts
from headscale_ha.components.workload import cluster_service, data_claim, singleton_deployment

APP = "vaultwarden"
PORT = 8080
DATA_DIR = "/data"
IMAGE = "docker.io/vaultwarden/server:1.32.7"
RESOURCES = ComputeResources(
    requests=ResourceAmounts(cpu="20m", memory="64Mi"), limits=ResourceAmounts(cpu="500m", memory="256Mi")
)


@dataclass(frozen=True, kw_only=True)
class VaultwardenArgs:
    namespace: str  # must exist and enforce `restricted`
    nfs_server: str  # NFS export of the backup; `<nfs_path>/vaultwarden` must be writable by UID 65532
    nfs_path: str
    storage_class: str | None = None  # class of the database claim; None: the cluster's default
    data_size: str = "1Gi"


class Vaultwarden(pulumi.ComponentResource):
    """One Vaultwarden pod (SQLite has one writer), its database claim and its Litestream backup.

    Outputs: `service` (the ClusterIP Service's name), `backupClaim` (the claim of the NFS export).
    """

    service_name: str
    backup_claim: str

    def __init__(self, name: str, args: VaultwardenArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("reuse-example:app:Vaultwarden", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        meta: Meta = {"namespace": args.namespace, "labels": labels(APP, "app", part_of=APP)}
        backup_settings = BackupSettings(nfs=Nfs(server=args.nfs_server, path=args.nfs_path))
        assert backup_settings.nfs is not None
        volume = BackupVolume(
            f"{name}-backup-volume",
            BackupVolumeArgs(namespace=args.namespace, part_of=APP, nfs=backup_settings.nfs),
            opts=child,
        )
        self.backup_claim = volume.claim_name
        claim = data_claim(
            f"{name}-data",
            meta=meta,
            name=f"{APP}-data",
            size=args.data_size,
            storage_class=args.storage_class,
            parent=self,
        )
        backup = LitestreamBackup(
            f"{name}-backup",
            LitestreamBackupArgs(
                app=APP,
                part_of=APP,
                namespace=args.namespace,
                settings=backup_settings,
                db_path=f"{DATA_DIR}/db.sqlite3",
                data_volume="data",
                data_mount=DATA_DIR,
                pvc_name=f"{APP}-data",
                backup_claim=volume.claim_name,
            ),
            opts=child,
        )
        singleton_deployment(
            f"{name}-deployment",
            meta=meta,
            app=APP,
            component="app",
            replicas=1,
            pod_spec=self._pod_spec(backup),
            annotations={"checksum/backup": backup.config_checksum},
            part_of=APP,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[claim, volume, backup]),
        )
        self.service_name = APP
        cluster_service(f"{name}-service", meta=meta, app=APP, ports={"http": PORT}, parent=self, part_of=APP)
        self.register_outputs({"service": self.service_name, "backupClaim": self.backup_claim})

    @staticmethod
    def _pod_spec(backup: LitestreamBackup) -> PodSpecArgsDict:
        container: ContainerArgsDict = {
            "name": APP,
            "image": IMAGE,
            "env": [
                {"name": "ROCKET_PORT", "value": str(PORT)},  # unprivileged port: the pod runs as non-root
                {"name": "DATA_FOLDER", "value": DATA_DIR},
                {"name": "DATABASE_URL", "value": f"{DATA_DIR}/db.sqlite3"},
            ],
            "ports": [{"name": "http", "container_port": PORT, "protocol": "TCP"}],
            "readiness_probe": {"http_get": {"path": "/alive", "port": "http"}, "period_seconds": 10},
            "resources": resources(RESOURCES),
            "security_context": container_security(),
            "volume_mounts": [{"name": "data", "mount_path": DATA_DIR}, {"name": "tmp", "mount_path": "/tmp"}],
        }
        return {
            "automount_service_account_token": False,
            "enable_service_links": False,
            "security_context": pod_security(),
            "init_containers": backup.pod_init_containers,
            "containers": [container],
            "volumes": [
                {"name": "data", "persistent_volume_claim": {"claim_name": f"{APP}-data"}},
                {"name": "tmp", "empty_dir": {"size_limit": "64Mi"}},
                *backup.pod_volumes,
            ],
        }
