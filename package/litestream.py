"""LitestreamBackup as the component package exposes it: restore-before-serve and continuous replication of one
SQLite database, as pod fragments a workload written in any Pulumi language splices into its own pod.

The Python component (components/litestream.py) is built unchanged as the child of the same name. Its product is
mostly not resources but pieces of the protected application's pod spec (the restore init container, the native
sidecars, their volumes, the config checksum); a Python caller reads them as attributes, a consumer of the package
reads them as the outputs below. What a Python caller does with a function (``record_served``, the served witness
written once the Deployment is ready) or with resources (``pod_dependencies``) cannot cross the schema: the outputs
carry what the consumer needs to do the same, and the component's docstring says how.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from typing import Any, NotRequired, TypedDict

import pulumi
from pulumi.errors import InputPropertyError

from headscale_ha.components import backup_volume, litestream, position_recorder
from headscale_ha.components import settings as models
from headscale_ha.components.config_types import AbsolutePath, DnsLabel, Quantity
from headscale_ha.components.pod import labels, object_name, selector
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import checked_value, dated_override, settings_of

#: The pod volumes the component brings (some only with some inputs): the application's data volume must differ.
_OWN_VOLUMES = (
    litestream.BACKUP_VOLUME,
    litestream.CONFIG_VOLUME,
    litestream.TMP_VOLUME,
    litestream.SERVED_VOLUME,
    litestream.BACKUP_KEY_VOLUME,
    litestream.UPGRADE_SCRATCH_VOLUME,
    position_recorder.POSITION_VOLUME,
    position_recorder.TOKEN_VOLUME,
    position_recorder.TMP_VOLUME,
)


class LitestreamBackupArgs(TypedDict):
    """Where the application keeps its SQLite database, where the replica goes and how the backup must behave.

    Pulumi resources cannot cross the schema: the backup claim must exist before the pod starts (`dependsOn` its
    BackupVolume from the workload)."""

    app: str
    """The application's name (a DNS label): names the backup directory `<claim>/<app>` and every object made."""
    part_of: str
    (
        "The application the backup belongs to: `app.kubernetes.io/part-of` of every object it makes and of the "
        "metrics Service's selector (e.g. `vaultwarden`)."
    )
    namespace: str
    """Namespace of the application, of the backup's ConfigMap, Secret, ServiceAccount and ReplicationSource."""
    settings: types.Backup
    (
        "Litestream image, sync interval, retention and resources; `auth` (signed backups: max age, overrides, the "
        "position recorder); `volsync` for restic snapshots of the data claim (needs `local.storage: persistent` "
        "and `pvcName`). `nfs`, `local` and `rehearsal` are not read here: the claim is `backupClaim`."
    )
    db_path: str
    """The SQLite database file, an absolute path inside `dataMount` (e.g. `/data/db.sqlite3`)."""
    data_volume: str
    """The pod volume of the application that holds `dbPath`: the restore and the sidecar mount it too."""
    data_mount: str
    """Where `dataVolume` is mounted (in the application's container and in the backup's containers)."""
    pvc_name: NotRequired[str]
    """The claim behind `dataVolume`, which VolSync snapshots; absent: disposable storage, no claim."""
    backup_claim: NotRequired[str]
    (
        "The claim of the NFS export; the pod mounts its sub-directory `<app>`. Default: the claim a BackupVolume "
        "makes for `settings.nfs` (so a program that cannot pass that component's output here names the same "
        "export); one of the two is required."
    )
    identity_fingerprint: NotRequired[pulumi.Input[str]]
    (
        "An identity fingerprint the backup must record: the restore refuses a replica of another identity; "
        "absent: no identity contract."
    )
    backup_key: NotRequired[pulumi.Input[str]]
    (
        "A backup key (64 hex, a Pulumi secret: mark it secret): a signer sidecar signs the replica with it and "
        "the restore refuses what it did not sign; absent: no authentication."
    )
    require_backup: NotRequired[bool]
    """The restore refuses to start empty: a standby must restore, never start empty. Default: `false`."""
    allow_empty_start: NotRequired[str]
    (
        "After a real loss of both the data volume and the backup on a site that has served: today's UTC date "
        "(YYYY-MM-DD) lets the restore start empty on that date only; absent: refused (exit 24)."
    )
    upgrade_version: NotRequired[str]
    (
        "The application's release: a pre-upgrade init container snapshots the database to "
        "`<backup>/pre-upgrade/<from>-<to>/` before a new release first starts and refuses a downgrade; absent: "
        "no version contract."
    )
    upgrade_scratch_size: NotRequired[str]
    """Room for that snapshot's scratch copies (about three times the database), a quantity. Default: `1Gi`."""
    metrics_port: NotRequired[int]
    """Serve the sidecar's metrics on this port, behind the headless Service `<app>-litestream`; absent: off."""
    record_position: NotRequired[bool]
    (
        "With `backupKey` and `settings.auth.recordPosition`: the pod records its signed position in the served "
        "witness through a `position-recorder` sidecar with its own ServiceAccount, and the restore refuses a "
        "replica signed below it (any rollback of the export, however young). Needs the API server reachable from "
        "the pod. Default: `false`."
    )


def litestream_args(args: LitestreamBackupArgs) -> litestream.LitestreamBackupArgs:
    """The Python component's args from the package's inputs, every input checked (nothing is registered yet)."""
    settings = settings_of(models.BackupSettings, args["settings"], "settings")
    db_path = checked_value(AbsolutePath, args["db_path"], "db_path")
    data_mount = checked_value(AbsolutePath, args["data_mount"], "data_mount").rstrip("/")
    if not db_path.startswith(f"{data_mount}/"):
        raise InputPropertyError(
            "dbPath", f"dbPath: must lie inside dataMount ({data_mount}), the volume the restore fills, got {db_path!r}"
        )
    data_volume = checked_value(DnsLabel, args["data_volume"], "data_volume")
    if data_volume in _OWN_VOLUMES:
        raise InputPropertyError(
            "dataVolume",
            f"dataVolume: {data_volume!r} is a volume of the backup's own; name the application's data volume "
            f"otherwise (taken: {', '.join(_OWN_VOLUMES)})",
        )
    pvc_name = args.get("pvc_name")
    if settings.volsync is not None and pvc_name is None:
        raise InputPropertyError(
            "pvcName", "pvcName: is required with settings.volsync, which snapshots that claim, got none"
        )
    backup_claim = args.get("backup_claim")
    if backup_claim is None:
        if settings.nfs is None:
            raise InputPropertyError(
                "backupClaim", "backupClaim: is required unless settings.nfs names the export, got neither"
            )
        backup_claim = backup_volume.claim_name(settings.nfs)
    allow_empty_start = args.get("allow_empty_start")
    if allow_empty_start is not None:
        dated_override(allow_empty_start, "allow_empty_start")
    metrics_port = args.get("metrics_port")
    if metrics_port is not None and not 1 <= metrics_port <= 65535:
        raise InputPropertyError("metricsPort", f"metricsPort: must be a port from 1 to 65535, got {metrics_port!r}")
    optional: dict[str, Any] = {}
    if "upgrade_scratch_size" in args:
        optional["upgrade_scratch_size"] = checked_value(Quantity, args["upgrade_scratch_size"], "upgrade_scratch_size")
    return litestream.LitestreamBackupArgs(
        app=checked_value(DnsLabel, args["app"], "app"),
        part_of=args["part_of"],
        namespace=checked_value(DnsLabel, args["namespace"], "namespace"),
        settings=settings,
        db_path=db_path,
        data_volume=data_volume,
        data_mount=args["data_mount"],
        pvc_name=pvc_name,
        backup_claim=backup_claim,
        identity_fingerprint=args.get("identity_fingerprint"),
        backup_key=args.get("backup_key"),
        require_backup=bool(args.get("require_backup", False)),
        allow_empty_start=allow_empty_start,
        upgrade_version=args.get("upgrade_version"),
        metrics_port=metrics_port,
        record_position=bool(args.get("record_position", False)),
        **optional,
    )


def served_witness(args: litestream.LitestreamBackupArgs) -> dict[str, Any]:
    """The served witness as ``litestream.record_served`` writes it: a ConfigMapPatch's metadata and data."""
    return {
        "metadata": {
            "name": litestream.served_config_map(args.app),
            "namespace": args.namespace,
            "labels": labels(args.app, "backup", args.part_of),
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "data": {litestream.SERVED_KEY: litestream.SERVED_VALUE},
    }


class LitestreamBackup(pulumi.ComponentResource):
    """Continuous replication of one application's SQLite database to an NFS claim, and its restore before the
    application serves: a single-writer SQLite application (one replica, Recreate) gets a node-loss-proof copy.

    The component makes the backup's ConfigMap (litestream.yml and the scripts), with `backupKey` the key's Secret,
    with the position recorder its ServiceAccount, Role and RoleBinding, with `metricsPort` the metrics Service,
    with `settings.volsync` a ReplicationSource. The rest is the consumer's pod, which must take these outputs:

    - `initContainers`: first in the pod's `initContainers`, in this order, before any of the consumer's own. The
      first is the restore (it must succeed before anything else starts); the last ones are native sidecars
      (`restartPolicy: Always`: Litestream, with `backupKey` the signer, with the recorder the recorder), which run
      beside the application; Litestream's startup probe holds the application until the replica has caught up.
      Do not move the sidecars to `containers`: they would lose that ordering and the drain on stop.
    - `volumes`: appended to the pod's `volumes`, beside the application's own volume `dataVolume` (mounted at
      `dataMount`, which the init containers mount too).
    - `configChecksum`: a pod template annotation (e.g. `checksum/litestream`), so a changed backup config rolls
      the pod.
    - `serviceAccountName`: when set, the pod's `serviceAccountName` (the recorder's account); keep
      `automountServiceAccountToken: false`, the recorder mounts its own projected token. Absent: leave it unset.
    - `podLabels`: labels the pod template must carry (the metrics Service selects the pod by them).
    - `servedWitness`: once the workload has rolled out ready, write it as a `kubernetes:core/v1:ConfigMapPatch`
      (`metadata` and `data` as given) with `dependsOn` the Deployment and `retainOnDelete: true`; write it where
      the workload runs (replicas > 0) and on a standby (`requireBackup`), never before the first ready rollout
      (a witness present at the first start refuses the empty start). It keeps a site that has served from
      starting empty after losing both volumes.

    The pod must run as UID/GID 65532 with `fsGroup: 65532` (the containers are non-root and the restore writes the
    data volume), and its Deployment should `dependsOn` this component: its pods need the recorder's account, and a
    destroy must stop them (the recorder's last record) before that account's RBAC goes."""

    config_map_name: pulumi.Output[str]
    """The ConfigMap with litestream.yml and the restore (and sidecar) scripts, mounted by `volumes`."""
    backup_dir: pulumi.Output[str]
    """Where the backup's containers see the replica directory: `/backup/<app>`."""
    init_containers: pulumi.Output[list[dict[str, Any]]]
    """The restore init container, then the native sidecars: first in the pod's `initContainers`, in this order."""
    volumes: pulumi.Output[list[dict[str, Any]]]
    """The pod volumes the init containers and sidecars mount: appended to the pod's `volumes`."""
    config_checksum: pulumi.Output[str]
    """Checksum of the backup's config and scripts: a pod template annotation, so that a change rolls the pod."""
    service_account_name: pulumi.Output[str] | None
    """The pod's `serviceAccountName` with the position recorder; absent: the namespace's default (no token)."""
    pod_labels: pulumi.Output[dict[str, str]]
    """Labels the pod template must carry: the metrics Service `<app>-litestream` selects the pod by them."""
    metrics_service_name: pulumi.Output[str] | None
    """The headless Service in front of the sidecar's metrics (what a ServiceMonitor selects); absent: no metrics."""
    backup_key_secret_name: pulumi.Output[str] | None
    """The Secret holding the backup key (what a restore rehearsal mounts); absent: no `backupKey`."""
    served_witness: pulumi.Output[dict[str, Any]]
    (
        "The served witness to write once the workload is ready: the `metadata` and `data` of a ConfigMapPatch "
        "that `dependsOn` the workload and is retained on delete (see the component's description)."
    )

    @staticmethod
    def component_args(
        args: LitestreamBackupArgs, opts: pulumi.ResourceOptions | None = None
    ) -> litestream.LitestreamBackupArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        return litestream_args(args)

    def __init__(self, name: str, args: LitestreamBackupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:LitestreamBackup", name, None, opts)
        backup = litestream.LitestreamBackup(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "config_map_name": backup.config_map.metadata.apply(object_name),
                "backup_dir": backup.backup_dir,
                "init_containers": backup.init_containers,
                "volumes": backup.volumes,
                "config_checksum": backup.config_checksum,
                "service_account_name": backup.service_account_name,
                "pod_labels": selector(component_args.app, component_args.part_of),
                "metrics_service_name": None
                if backup.metrics_service is None
                else litestream.metrics_service_name(component_args.app),
                "backup_key_secret_name": None
                if backup.backup_key is None
                else litestream.backup_key_secret(component_args.app),
                "served_witness": served_witness(component_args),
            },
        )
