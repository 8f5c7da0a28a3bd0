"""LitestreamBackup: continuous SQLite replication to NFS, and restore-before-serve.

The component owns the backup's config (a ConfigMap with litestream.yml and the restore script) and,
optionally, a VolSync ReplicationSource for the volume. The application's Deployment takes the pod-spec
pieces it exposes: a restore init container that must succeed before anything else starts, and a native
sidecar (an init container with restartPolicy Always) that replicates while the application runs.

The served witness: the restore's markers live on the two volumes they protect (the data claim and the NFS backup
directory), so losing both looks exactly like a first start. :func:`record_served` writes a third
witness outside both, the ConfigMap `<app>-served` (key `served: "true"`), once the application's Deployment has
rolled out ready (on a standby too, for the day it is promoted); the restore container reads it through an optional
ConfigMap volume and refuses an empty start while it exists (exit 24), unless ``allow_empty_start`` holds today's UTC
date. The witness is a ConfigMapPatch (server-side apply: created if absent, adopted if a retained one exists, so a
site that is demoted and promoted again never fails with AlreadyExists) and is retained on delete: `destroy` and a
demotion leave it in the cluster.

Authenticated backups (``backup_key``): a third native sidecar, ``backup-signer`` (the Litestream image running
components/scripts/litestream-sign.sh), signs the replica's manifest with the application's backup key whenever the
replica changes; the restore verifies it before a byte is restored and refuses what the key did not sign. The key
(the Secret `<app>-backup-key`) is mounted into the signer, the restore, the pre-upgrade snapshot (its MAC) and the
rehearsal only: not into Litestream, not into the application. With ``backup.auth.recordPosition`` (the default),
the position recorder sidecar (components/position_recorder.py) copies the signer's last position into the served
witness, outside the export, and the restore refuses a replica signed below it: a rollback of the export is caught
however young it is.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ConfigMapVolumeSourceArgsDict,
    ContainerArgs,
    ContainerArgsDict,
    EnvVarArgsDict,
    KeyToPathArgsDict,
    PodSecurityContextArgs,
    ResourceRequirementsArgs,
    SecretVolumeSourceArgsDict,
    SecurityContextArgs,
    VolumeArgs,
    VolumeArgsDict,
    VolumeMountArgs,
    VolumeMountArgsDict,
)

from headscale_ha.components.api_spelling import api_spelled, python_spelled
from headscale_ha.components.litestream_config import (
    duration_seconds,
    render_litestream_config,
    restore_script,
)
from headscale_ha.components.pod import (
    checksum,
    container_security,
    labels,
    object_name,
    pod_security,
    resources,
    selector,
)
from headscale_ha.components.position_recorder import (
    POSITION_FILE,
    RECORDER_SCRIPT_KEY,
    WITNESS_KEY,
    position_mount,
    recorder_account,
    recorder_container,
    recorder_rbac,
    recorder_script,
    recorder_volumes,
)
from headscale_ha.components.settings import BackupSettings
from headscale_ha.components.shell_scripts import packaged_script
from headscale_ha.components.upgrade import UPGRADE_SCRIPT_KEY, pre_upgrade_container, pre_upgrade_script

BACKUP_MOUNT = "/backup"
CONFIG_MOUNT = "/etc/litestream"
CONFIG_FILE = f"{CONFIG_MOUNT}/litestream.yml"
SCRIPT_FILE = f"{CONFIG_MOUNT}/restore.sh"
BACKUP_VOLUME = "backup"
CONFIG_VOLUME = "litestream-config"
TMP_VOLUME = "litestream-tmp"
SERVED_VOLUME = "served-witness"
#: The sidecar's metrics port, its name in the pod and on the `<app>-litestream` Service, and that Service's component.
LITESTREAM_METRICS_PORT = 9091
METRICS_PORT_NAME = "ls-metrics"
METRICS_COMPONENT = "backup-metrics"
UPGRADE_SCRATCH_VOLUME = "upgrade-scratch"
UPGRADE_SCRATCH_MOUNT = "/scratch"
#: Not under CONFIG_MOUNT: a mount point cannot be created inside the read-only ConfigMap volume mounted there.
SERVED_MOUNT = "/etc/litestream-served"
SERVED_KEY = "served"
SERVED_FILE = f"{SERVED_MOUNT}/{SERVED_KEY}"
#: The witness of a site whose application has served here: the restore requires the backup and, with signed backups,
#: the position the running pod recorded.
SERVED_VALUE = "true"
#: The witness a standby writes: the tailnet has served (the restore requires the backup), but not here, so no pod of
#: this site ever recorded a position (the first start after a promotion checks the replica's signed age alone).
STANDBY_SERVED_VALUE = "standby"
#: The signer and verifier of the replica's manifest, in the config ConfigMap beside the restore script.
MANIFEST_SCRIPT_NAME = "litestream-manifest.sh"
MANIFEST_SCRIPT_KEY = "manifest.sh"
MANIFEST_SCRIPT_FILE = f"{CONFIG_MOUNT}/{MANIFEST_SCRIPT_KEY}"
#: The signer itself (it sources the manifest script), and its own scratch volume: the mirror of the files it signed
#: and the restores of its proofs (components/scripts/litestream-sign.sh).
SIGN_SCRIPT_NAME = "litestream-sign.sh"
SIGN_SCRIPT_KEY = "sign.sh"
SIGN_SCRIPT_FILE = f"{CONFIG_MOUNT}/{SIGN_SCRIPT_KEY}"
SIGNER_SCRATCH_VOLUME = "signer-scratch"
SIGNER_SCRATCH_MOUNT = "/signer-scratch"
#: The backup key: its Secret's item, and where the signer, the restore, the pre-upgrade and the rehearsal see it.
BACKUP_KEY_VOLUME = "backup-key"
BACKUP_KEY_ITEM = "backup.key"
BACKUP_KEY_MOUNT = "/etc/litestream-key"
BACKUP_KEY_FILE = f"{BACKUP_KEY_MOUNT}/{BACKUP_KEY_ITEM}"
#: The manifest's name in the application's backup directory, beside (never inside) Litestream's replica.
MANIFEST_FILE_NAME = "replica.manifest"
#: The restore's record of the files it verified, beside the database (litestream-restore.sh), carried by the signer.
BASELINE_FILE_NAME = ".backup-baseline"
SIGNER_CONTAINER = "backup-signer"
#: The catch-up check of the Litestream sidecar (its startup probe and its preStop hook), in the config ConfigMap.
POSITION_SCRIPT_NAME = "litestream-position.sh"
POSITION_SCRIPT_KEY = "position.sh"
POSITION_SCRIPT_FILE = f"{CONFIG_MOUNT}/{POSITION_SCRIPT_KEY}"
#: How long the sidecar's startup probe may take to see the replica caught up before the kubelet restarts it.
CATCH_UP_SECONDS = 300


def backup_key_secret(app: str) -> str:
    """The Secret holding the tailnet's backup key for one application, in its namespace."""
    return f"{app}-backup-key"


def manifest_script() -> str:
    """Text of the manifest signer and verifier (components/scripts/litestream-manifest.sh)."""
    return packaged_script(MANIFEST_SCRIPT_NAME)


def backup_key_volume(secret_name: str) -> VolumeArgsDict:
    """The pod volume of the backup key (Secret ``secret_name``): its one item, read-only to the pod's group."""
    secret: SecretVolumeSourceArgsDict = {
        "secret_name": secret_name,
        "default_mode": 0o440,
        "items": [{"key": BACKUP_KEY_ITEM, "path": BACKUP_KEY_ITEM}],
    }
    return {"name": BACKUP_KEY_VOLUME, "secret": secret}


BACKUP_KEY_VOLUME_MOUNT: VolumeMountArgsDict = {
    "name": BACKUP_KEY_VOLUME,
    "mount_path": BACKUP_KEY_MOUNT,
    "read_only": True,
}


def served_config_map(app: str) -> str:
    """The name of an application's served witness ConfigMap, in its namespace."""
    return f"{app}-served"


def metrics_service_name(app: str) -> str:
    """The headless Service in front of an application's Litestream metrics."""
    return f"{app}-litestream"


def backup_mount(app: str, *, read_only: bool = False) -> VolumeMountArgsDict:
    """The application's own sub-directory of the backup claim, at `/backup/<app>` (the restore's BACKUP_DIR)."""
    mount: VolumeMountArgsDict = {"name": BACKUP_VOLUME, "mount_path": f"{BACKUP_MOUNT}/{app}", "sub_path": app}
    if read_only:
        mount["read_only"] = True
    return mount


def mover_security() -> dict[str, Any]:
    """VolSync's mover pod runs in this `restricted` namespace: the same pod security as the applications. In the
    API's spelling: it goes into a custom resource's spec, which the SDK sends as written."""
    return api_spelled(pod_security(), PodSecurityContextArgs)


class PodAccount(TypedDict, total=False):
    """The pod-spec field of the account the application's pod runs as (spread into its ``PodSpecArgsDict``)."""

    service_account_name: str


@dataclass(frozen=True, kw_only=True)
class LitestreamBackupArgs:
    """Where the application keeps its database and how the backup of it must behave."""

    app: str  # names the backup directory on NFS: <nfs path>/<app>
    #: The application the backup belongs to, the caller's: `app.kubernetes.io/part-of` of every object it makes
    #: (headscale-ha passes its own name; a program protecting Vaultwarden passes "vaultwarden").
    part_of: str
    namespace: str  # namespace of the application, its ConfigMap and its ReplicationSource
    settings: BackupSettings  # Litestream image, sync interval, retention, resources; VolSync snapshots when set
    db_path: str  # the SQLite database file inside data_mount
    data_volume: str  # pod volume that holds db_path
    data_mount: str  # where that volume is mounted
    pvc_name: str | None  # the claim behind data_volume (for VolSync); None: disposable storage, no claim
    backup_claim: str  # the claim of the NFS export; this app mounts its sub-directory `<app>` of it
    #: The identity's fingerprint (SHA-256 of the Noise key, components/identity.py) the backup must record; the
    #: restore gets this, never the key. None: no identity contract.
    identity_fingerprint: pulumi.Input[str] | None = None
    #: The tailnet's backup key (a secret, 64 hex): the signer sidecar signs the replica with it and the restore
    #: refuses what it did not sign. None: no authentication.
    backup_key: pulumi.Input[str] | None = None
    require_backup: bool = False  # a standby must restore, never start empty
    #: The override after a real loss of both volumes: today's UTC date (YYYY-MM-DD) lets a site that has served
    #: start empty on that date only; None: an empty start of a site that has served is refused (exit 24).
    allow_empty_start: str | None = None
    #: Headscale's release: a pre-upgrade init container snapshots the database to `<backup>/pre-upgrade/<from>-<to>/`
    #: before a new release first starts (and refuses a downgrade); None: no version contract (Headplane).
    upgrade_version: str | None = None
    #: Room for that snapshot's scratch copies (about three times the database): a Kubernetes quantity.
    upgrade_scratch_size: str = "1Gi"
    #: Room for the signer's mirror of what it signed and its proofs' two restores (about four times the database):
    #: a Kubernetes quantity.
    signer_scratch_size: str = "1Gi"
    #: Serve the sidecar's Prometheus metrics on this port, behind the headless Service `<app>-litestream`; None: off.
    metrics_port: int | None = None
    #: Whether this application's pod records its signed position in the served witness (when
    #: ``backup.auth.recordPosition`` is on): Headscale's, whose rollback would bring back revoked keys and deleted
    #: nodes. Headplane's is not: its pod then needs no API access (its database holds no access control).
    record_position: bool = False

    @property
    def reads_witness(self) -> bool:
        """Whether the restore reads the served witness: not on a standby, whose REQUIRE_BACKUP is stricter."""
        return not self.require_backup

    @property
    def records_position(self) -> bool:
        """Whether the running pod records its signed position in the served witness (signed backups only)."""
        return self.backup_key is not None and self.record_position and self.settings.auth.record_position


def litestream_yml(args: LitestreamBackupArgs) -> str:
    """litestream.yml: the database replicated to `<backup dir>/replica`, with the metrics address when served."""
    litestream = args.settings.litestream
    return render_litestream_config(
        db_path=args.db_path,
        replica_path=f"{BACKUP_MOUNT}/{args.app}/replica",
        sync_interval=litestream.sync_interval,
        retention=litestream.retention,
        metrics_addr=f":{args.metrics_port}" if args.metrics_port is not None else None,
    )


def config_scripts(args: LitestreamBackupArgs) -> dict[str, str]:
    """The scripts beside litestream.yml in the config ConfigMap (key -> text): the restore and the catch-up check
    always, the manifest signer, the position recorder and the pre-upgrade check when their containers run."""
    scripts = {"restore.sh": restore_script(), POSITION_SCRIPT_KEY: packaged_script(POSITION_SCRIPT_NAME)}
    if args.backup_key is not None:
        scripts[MANIFEST_SCRIPT_KEY] = manifest_script()
        scripts[SIGN_SCRIPT_KEY] = packaged_script(SIGN_SCRIPT_NAME)
    if args.records_position:
        scripts[RECORDER_SCRIPT_KEY] = recorder_script()
    if args.upgrade_version is not None:
        scripts[UPGRADE_SCRIPT_KEY] = pre_upgrade_script()
    return scripts


def pod_volumes(args: LitestreamBackupArgs) -> list[VolumeArgsDict]:
    """The volumes the backup's containers need in the application's pod: the backup claim, the config, scratch
    space, and (as configured) the backup key, the recorder's, the served witness and the upgrade's scratch."""
    volumes: list[VolumeArgsDict] = [
        {"name": BACKUP_VOLUME, "persistent_volume_claim": {"claim_name": args.backup_claim}},
        {"name": CONFIG_VOLUME, "config_map": {"name": f"{args.app}-litestream", "default_mode": 0o444}},
        {"name": TMP_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "16Mi"}},
    ]
    if args.backup_key is not None:
        volumes.append(backup_key_volume(backup_key_secret(args.app)))
        volumes.append({"name": SIGNER_SCRATCH_VOLUME, "empty_dir": {"size_limit": args.signer_scratch_size}})
    if args.records_position:
        volumes += recorder_volumes()
    if args.reads_witness:
        # Optional: absent until the first ready rollout (the kubelet then mounts an empty directory); so is
        # each key until it is written (an optional volume skips a missing key).
        items: list[KeyToPathArgsDict] = [{"key": SERVED_KEY, "path": SERVED_KEY}]
        if args.records_position:
            items.append({"key": WITNESS_KEY, "path": WITNESS_KEY})
        witness: ConfigMapVolumeSourceArgsDict = {
            "name": served_config_map(args.app),
            "optional": True,
            "default_mode": 0o444,
            "items": items,
        }
        volumes.append({"name": SERVED_VOLUME, "config_map": witness})
    if args.upgrade_version is not None:
        volumes.append({"name": UPGRADE_SCRATCH_VOLUME, "empty_dir": {"size_limit": args.upgrade_scratch_size}})
    return volumes


class LitestreamBackup(pulumi.ComponentResource):
    """Backup of one application's SQLite database; see the module docstring.

    Outputs (registered):
    - ``configMap`` [attribute config_map]: the ConfigMap with litestream.yml and the restore script;
    - ``backupDir`` [attribute backup_dir]: where the pod sees its replica directory (`/backup/<app>`).
    The served witness is written by :func:`record_served`, called by the owner of the Deployment.
    The pod-spec pieces are attributes only, not outputs: ``pod_init_containers`` and ``pod_volumes`` (typed, what a
    Python program's pod takes), the same as ``init_containers`` and ``volumes`` in the API's spelling (what the
    component package hands out), and ``config_checksum``.
    """

    config_map: k8s.core.v1.ConfigMap
    replication_source: k8s.apiextensions.CustomResource | None
    #: The pod-spec pieces, typed: what a Python program's pod takes.
    pod_init_containers: list[ContainerArgsDict]
    pod_volumes: list[VolumeArgsDict]
    #: The same pieces in the API's spelling (``volumeMounts``): the component package's outputs, which a program
    #: in any language places in its pod as written.
    init_containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    config_checksum: str
    backup_dir: str
    backup_key: k8s.core.v1.Secret | None
    metrics_service: k8s.core.v1.Service | None
    #: The pod's ServiceAccount (the position recorder's); None: the namespace's default, no token anywhere.
    service_account_name: str | None
    #: What the application's Deployment must depend on: its pods need the recorder's account to be created, and a
    #: destroy must stop them (the recorder's last record) before their RBAC goes.
    pod_dependencies: list[pulumi.Resource]
    #: The name and args it was built with: what ``record_served`` writes the witness from.
    resource_name: str
    args: LitestreamBackupArgs

    def __init__(self, name: str, args: LitestreamBackupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:litestream:LitestreamBackup", name, None, opts)
        self.resource_name, self.args = name, args
        self.backup_dir = f"{BACKUP_MOUNT}/{args.app}"
        config_text = litestream_yml(args)
        scripts = config_scripts(args)
        self.config_checksum = checksum(config_text, *scripts.values())
        child = pulumi.ResourceOptions(parent=self)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={
                "name": f"{args.app}-litestream",
                "namespace": args.namespace,
                "labels": labels(args.app, "backup", args.part_of),
            },
            data={"litestream.yml": config_text, **scripts},
            opts=child,
        )
        self.backup_key = self._backup_key(name, args, args.backup_key) if args.backup_key is not None else None
        self.service_account_name = None
        self.pod_dependencies = []
        if args.records_position:
            self.pod_dependencies += recorder_rbac(
                name,
                app=args.app,
                part_of=args.part_of,
                namespace=args.namespace,
                witness=served_config_map(args.app),
                opts=child,
            )
            self.service_account_name = recorder_account(args.app)
        self.pod_volumes = pod_volumes(args)
        # In order: restore, then (Headscale) the pre-upgrade snapshot while nothing writes, then the sidecar.
        # The signer before Litestream: sidecars stop in reverse order, so it signs the tail Litestream ships last;
        # the recorder before the signer, so it records the signer's last position.
        self.pod_init_containers = [
            self._restore(args),
            *([self._pre_upgrade(args)] if args.upgrade_version is not None else []),
            *([self._recorder(args)] if args.records_position else []),
            *([self._signer(args)] if args.backup_key is not None else []),
            self._replicate(args),
        ]
        self.volumes = api_spelled(self.pod_volumes, VolumeArgs)
        self.init_containers = api_spelled(self.pod_init_containers, ContainerArgs)
        self.replication_source = self._volsync(name, args, child)
        self.metrics_service = self._metrics_service(name, args) if args.metrics_port is not None else None
        self.register_outputs({"configMap": self.config_map.metadata.apply(object_name), "backupDir": self.backup_dir})

    def _backup_key(self, name: str, args: LitestreamBackupArgs, key: pulumi.Input[str]) -> k8s.core.v1.Secret:
        """The Secret `<app>-backup-key` with the tailnet's backup key ``key``, mounted by the signer and the
        restore."""
        # A Pulumi secret end to end: the Secret's data is encrypted in the state and never rendered in plain.
        return k8s.core.v1.Secret(
            f"{name}-backup-key",
            metadata={
                "name": backup_key_secret(args.app),
                "namespace": args.namespace,
                "labels": labels(args.app, "backup", args.part_of),
            },
            type="Opaque",
            string_data={BACKUP_KEY_ITEM: pulumi.Output.secret(key)},
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _metrics_service(self, name: str, args: LitestreamBackupArgs) -> k8s.core.v1.Service:
        """The headless Service `<app>-litestream` in front of the sidecar's metrics port."""
        assert args.metrics_port is not None
        # Headless, numeric target port: scraped through its endpoints, which need no container port lookup
        # (the port is a native sidecar's, an init container).
        return k8s.core.v1.Service(
            f"{name}-metrics",
            metadata={
                "name": metrics_service_name(args.app),
                "namespace": args.namespace,
                "labels": labels(args.app, METRICS_COMPONENT, args.part_of),
            },
            spec={
                "cluster_ip": "None",
                "selector": selector(args.app, args.part_of),
                "ports": [
                    {
                        "name": METRICS_PORT_NAME,
                        "port": args.metrics_port,
                        "target_port": args.metrics_port,
                        "protocol": "TCP",
                    }
                ],
            },
            opts=pulumi.ResourceOptions(parent=self),
        )

    def pod_account(self) -> PodAccount:
        """The pod-spec fields of the application's pod: its ServiceAccount when the recorder needs one. The token is
        never automounted; only the recorder mounts it (projected)."""
        return {"service_account_name": self.service_account_name} if self.service_account_name else {}

    def _mounts(self, args: LitestreamBackupArgs) -> list[VolumeMountArgsDict]:
        return [
            {"name": args.data_volume, "mount_path": args.data_mount},
            backup_mount(args.app),
            {"name": CONFIG_VOLUME, "mount_path": CONFIG_MOUNT, "read_only": True},
            {"name": TMP_VOLUME, "mount_path": "/tmp"},
        ]

    def _restore(self, args: LitestreamBackupArgs) -> ContainerArgsDict:
        env: list[EnvVarArgsDict] = [
            {"name": "DB_PATH", "value": args.db_path},
            {"name": "BACKUP_DIR", "value": self.backup_dir},
            {"name": "LITESTREAM_CONFIG", "value": CONFIG_FILE},
            {"name": "REQUIRE_BACKUP", "value": "true" if args.require_backup else "false"},
        ]
        mounts = self._mounts(args)
        if args.reads_witness:
            env.append({"name": "SERVED_FILE", "value": SERVED_FILE})
            mounts.append({"name": SERVED_VOLUME, "mount_path": SERVED_MOUNT, "read_only": True})
            if args.allow_empty_start:
                env.append({"name": "ALLOW_EMPTY_START", "value": args.allow_empty_start})
            if args.records_position:
                env.append({"name": "POSITION_WITNESS_FILE", "value": f"{SERVED_MOUNT}/{WITNESS_KEY}"})
        if args.identity_fingerprint is not None:
            env.append({"name": "IDENTITY_FINGERPRINT", "value": args.identity_fingerprint})
        if args.backup_key is not None:
            auth = args.settings.auth
            env.extend(
                [
                    {"name": "BACKUP_KEY_FILE", "value": BACKUP_KEY_FILE},
                    {"name": "MANIFEST_FILE", "value": f"{self.backup_dir}/{MANIFEST_FILE_NAME}"},
                    {"name": "MANIFEST_SCRIPT", "value": MANIFEST_SCRIPT_FILE},
                    {
                        "name": "MAX_REPLICA_AGE_SECONDS",
                        "value": str(duration_seconds(auth.max_age, argument="backup.auth.maxAge")),
                    },
                ]
            )
            opt_ins = {
                "ALLOW_UNSIGNED_RESTORE": auth.allow_unsigned,
                "ALLOW_STALE_RESTORE": auth.allow_stale,
                "ALLOW_ROLLBACK_RESTORE": auth.allow_rollback,
            }
            env.extend({"name": variable, "value": value} for variable, value in opt_ins.items() if value)
            mounts.append(BACKUP_KEY_VOLUME_MOUNT)
        return {
            "name": "restore",
            "image": args.settings.litestream.image,
            "command": ["/bin/sh", SCRIPT_FILE],
            "env": env,
            "volume_mounts": mounts,
            # Sized for the restore, which uses more than one core: an init container's request does not add to
            # the pod's steady-state request, and under the sidecar's limit the restore takes five times longer.
            "resources": resources(args.settings.litestream.restore_resources),
            "security_context": container_security(),
        }

    def _pre_upgrade(self, args: LitestreamBackupArgs) -> ContainerArgsDict:
        """components/upgrade.py builds the container in the API's spelling (its public builder's terms): the pieces
        go in and the container comes back through the SDK's tables."""
        assert args.upgrade_version is not None
        scratch: VolumeMountArgsDict = {"name": UPGRADE_SCRATCH_VOLUME, "mount_path": UPGRADE_SCRATCH_MOUNT}
        container = pre_upgrade_container(
            image=args.settings.litestream.image,
            to_version=args.upgrade_version,
            db_path=args.db_path,
            backup_dir=self.backup_dir,
            script_file=f"{CONFIG_MOUNT}/{UPGRADE_SCRIPT_KEY}",
            mounts=api_spelled(self._mounts(args), VolumeMountArgs),
            scratch_mount=api_spelled(scratch, VolumeMountArgs),
            resources=api_spelled(resources(args.settings.litestream.restore_resources), ResourceRequirementsArgs),
            security=api_spelled(container_security(), SecurityContextArgs),
            **(
                {
                    "key_mount": api_spelled(BACKUP_KEY_VOLUME_MOUNT, VolumeMountArgs),
                    "key_file": BACKUP_KEY_FILE,
                    "manifest_script_file": MANIFEST_SCRIPT_FILE,
                }
                if args.backup_key is not None
                else {}
            ),
        )
        return python_spelled(container, ContainerArgs)

    def _recorder(self, args: LitestreamBackupArgs) -> ContainerArgsDict:
        return recorder_container(
            image=args.settings.auth.recorder_image,
            witness=served_config_map(args.app),
            namespace=args.namespace,
            script_file=f"{CONFIG_MOUNT}/{RECORDER_SCRIPT_KEY}",
            config_mount={"name": CONFIG_VOLUME, "mount_path": CONFIG_MOUNT, "read_only": True},
            amounts=args.settings.litestream.resources,
        )

    def _signer(self, args: LitestreamBackupArgs) -> ContainerArgsDict:
        """The native sidecar that signs the replica's manifest (litestream-sign.sh run); it alone of the running
        containers holds the backup key. It reads the data volume (read-only) for Litestream's local copies of the
        level-0 files it ships and the restore's record of what it verified, and proves compactions and snapshots in
        its own scratch volume: it signs only what this writer wrote."""
        return {
            "name": SIGNER_CONTAINER,
            "image": args.settings.litestream.image,
            "command": ["/bin/sh", SIGN_SCRIPT_FILE, "run"],
            "restart_policy": "Always",  # native sidecar: starts before Litestream, stops after it
            "env": [
                {"name": "KEY_FILE", "value": BACKUP_KEY_FILE},
                {"name": "APP", "value": args.app},
                {"name": "REPLICA_DIR", "value": f"{self.backup_dir}/replica"},
                {"name": "MANIFEST_FILE", "value": f"{self.backup_dir}/{MANIFEST_FILE_NAME}"},
                {"name": "MANIFEST_SCRIPT", "value": MANIFEST_SCRIPT_FILE},
                {"name": "SCRATCH_DIR", "value": SIGNER_SCRATCH_MOUNT},
                {"name": "DB_PATH", "value": args.db_path},
                {"name": "BASELINE_FILE", "value": f"{posixpath.dirname(args.db_path)}/{BASELINE_FILE_NAME}"},
                *([{"name": "POSITION_FILE", "value": POSITION_FILE}] if args.records_position else []),
            ],
            "volume_mounts": [
                {"name": args.data_volume, "mount_path": args.data_mount, "read_only": True},
                backup_mount(args.app),
                {"name": CONFIG_VOLUME, "mount_path": CONFIG_MOUNT, "read_only": True},
                {"name": TMP_VOLUME, "mount_path": "/tmp"},
                {"name": SIGNER_SCRATCH_VOLUME, "mount_path": SIGNER_SCRATCH_MOUNT},
                BACKUP_KEY_VOLUME_MOUNT,
                *([position_mount(read_only=False)] if args.records_position else []),
            ],
            "resources": resources(args.settings.litestream.resources),
            "security_context": container_security(),
        }

    def _replicate(self, args: LitestreamBackupArgs) -> ContainerArgsDict:
        position = ["/bin/sh", POSITION_SCRIPT_FILE]
        container: ContainerArgsDict = {
            "name": "litestream",
            "image": args.settings.litestream.image,
            "args": ["replicate", "-config", CONFIG_FILE],
            "restart_policy": "Always",  # native sidecar: starts after the restore, stops after the app
            # The position check reads these (Litestream itself ignores them).
            "env": [
                {"name": "DB_PATH", "value": args.db_path},
                {"name": "REPLICA_DIR", "value": f"{self.backup_dir}/replica"},
            ],
            # The application starts only once this succeeds (a native sidecar's startup probe holds the main
            # containers): after a restore, once Litestream has taken the database over and the replica holds its
            # position, so no write lands before the replica can hold it.
            "startup_probe": {
                "exec_": {"command": [*position, "caught-up"]},
                "period_seconds": 1,
                "timeout_seconds": 5,
                "failure_threshold": CATCH_UP_SECONDS,
            },
            # The application has stopped when a sidecar's preStop runs: wait for the last write to be shipped
            # (a SIGTERM less than a tick after Litestream restarted would ship nothing), then stop.
            "lifecycle": {"pre_stop": {"exec_": {"command": [*position, "drain"]}}},
            "volume_mounts": self._mounts(args),
            "resources": resources(args.settings.litestream.resources),
            "security_context": container_security(),
        }
        if args.metrics_port is not None:
            container["ports"] = [{"name": METRICS_PORT_NAME, "container_port": args.metrics_port, "protocol": "TCP"}]
        return container

    @staticmethod
    def _volsync(
        name: str, args: LitestreamBackupArgs, opts: pulumi.ResourceOptions
    ) -> k8s.apiextensions.CustomResource | None:
        volsync = args.settings.volsync
        if volsync is None:
            return None
        if args.pvc_name is None:
            raise ValueError(f"{args.app}: backup.volsync needs a claim to snapshot (backup.local.storage persistent)")
        restic: dict[str, Any] = {
            "repository": volsync.repository,
            "copyMethod": "Snapshot",
            "pruneIntervalDays": 7,
            "retain": {"daily": volsync.keep_daily, "weekly": volsync.keep_weekly},
            # The mover pod runs in this `restricted` namespace: non-root and RuntimeDefault seccomp, or refused.
            "moverSecurityContext": mover_security(),
        }
        if volsync.volume_snapshot_class:
            restic["volumeSnapshotClassName"] = volsync.volume_snapshot_class
        return k8s.apiextensions.CustomResource(
            f"{name}-volsync",
            api_version="volsync.backube/v1alpha1",
            kind="ReplicationSource",
            metadata={
                "name": f"{args.app}-data",
                "namespace": args.namespace,
                "labels": labels(args.app, "backup", args.part_of),
            },
            spec={"sourcePVC": args.pvc_name, "trigger": {"schedule": volsync.schedule}, "restic": restic},
            opts=opts,
        )


def record_served(
    backup: LitestreamBackup, deployment: pulumi.Resource, *, replicas: int, parent: pulumi.Resource
) -> k8s.core.v1.ConfigMapPatch | None:
    """Write the served witness of ``backup``'s application once ``deployment`` has rolled out ready.

    pulumi-kubernetes awaits a Deployment's readiness on create and update, and a dependent is created only after
    its dependency succeeded: the witness appears after the first ready rollout. Written where the application
    serves (``replicas`` > 0), and on a standby (``require_backup``): a standby exists because the tailnet has
    served, so once promoted (its restore then reads the witness) it must restore the backup and never start empty,
    even before it has served there. A standby writes ``standby``, not ``true``: no pod of its own ever ran the
    position recorder, so its first start after a promotion has no recorded position to hold the replica to, and
    refusing it for that would make a promotion with the active gone impossible. Its first ready rollout as the
    active writes ``true``. None otherwise (an active site at 0 replicas): a witness written earlier stays
    in the cluster (retained), only Pulumi's state forgets it.

    The witness is ``parent``'s (the owner of the Deployment, which calls this after building it): a component is
    complete when its constructor returns, and the Deployment does not exist then. Release 0.1.0 made it a child of
    the LitestreamBackup component after that component had registered its outputs; the alias takes that resource
    over, so an existing witness is kept (`same`), never deleted and written again.
    """
    args = backup.args
    if not args.require_backup and (replicas <= 0 or not args.reads_witness):
        return None
    return k8s.core.v1.ConfigMapPatch(
        f"{backup.resource_name}-served",
        metadata={
            "name": served_config_map(args.app),
            "namespace": args.namespace,
            "labels": labels(args.app, "backup", args.part_of),
            # The object is this program's: take its fields over from any earlier field manager.
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        data={SERVED_KEY: SERVED_VALUE if replicas > 0 else STANDBY_SERVED_VALUE},
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[deployment],
            retain_on_delete=True,
            aliases=[pulumi.Alias(parent=backup)],
        ),
    )
