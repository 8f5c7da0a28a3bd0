"""An application's SQLite volume, its Litestream backup and its restore rehearsal: what Headscale and Headplane
(and any other single-writer SQLite application) take as one piece."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import VolumeArgsDict

from headscale_ha.components import backup_volume
from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.litestream import (
    LITESTREAM_METRICS_PORT,
    LitestreamBackup,
    LitestreamBackupArgs,
    backup_key_secret,
)
from headscale_ha.components.litestream_config import duration_seconds, parse_go_duration
from headscale_ha.components.pod import PART_OF, Meta
from headscale_ha.components.rehearsal import RestoreRehearsal, RestoreRehearsalArgs
from headscale_ha.components.settings import BackupSettings, ClusterSettings
from headscale_ha.components.workload import DATA_VOLUME, sqlite_volume


@dataclass(frozen=True)
class ReplicatedSqlite:
    """An application's SQLite volume and its Litestream backup, as the application's pod takes them."""

    volume: VolumeArgsDict  # the pod volume `data` (emptyDir, generic ephemeral volume or the claim)
    claim: k8s.core.v1.PersistentVolumeClaim | None  # the retained claim of persistent storage; None: disposable
    backup: LitestreamBackup
    rehearsal: RestoreRehearsal | None  # the scheduled restore rehearsal; None when backup.rehearsal is off


def replicated_sqlite(
    name: str,
    *,
    parent: pulumi.Resource,
    meta: Meta,
    backup: BackupSettings,
    storage_class: str | None,
    require_backup: bool,
    app: str,
    size: str,
    data_dir: str,
    db_file: str,
    identity_fingerprint: pulumi.Input[str] | None = None,
    backup_key: pulumi.Input[str] | None = None,
    allow_empty_start: str | None = None,
    upgrade_version: str | None = None,
    metrics: bool = False,
    record_position: bool = False,
    cluster: ClusterSettings,
) -> ReplicatedSqlite:
    """An application's SQLite volume and its Litestream backup: the pod mounts `volume` as the volume `data`.

    `backup.local` chooses disposable or persistent storage; `storage_class` is the persistent claim's class (None:
    the cluster default); `require_backup` makes the restore refuse an empty start (a standby must restore, never
    start empty); `allow_empty_start` (today's UTC date) lets a site that has served start empty after a real loss
    of both volumes; `upgrade_version` (Headscale's release) adds the pre-upgrade snapshot; `metrics` serves the
    sidecar's metrics; `cluster` places the rehearsal's pods like the application's; `identity_fingerprint` is the
    identity the backup must record; `backup_key` (a secret) signs the replica and authenticates its restores;
    `record_position` adds the position recorder (with ``backup.auth.recordPosition``).
    """
    if backup.nfs is None:
        raise ValueError(f"{app}: backup.nfs is required for a Litestream backup (checked by the config)")
    claim_name = f"{app}-data"
    volume, claim = sqlite_volume(
        f"{name}-data",
        meta=meta,
        claim_name=claim_name,
        size=size,
        local=backup.local,
        storage_class=storage_class,
        parent=parent,
    )
    litestream = LitestreamBackup(
        f"{name}-backup",
        LitestreamBackupArgs(
            app=app,
            part_of=PART_OF,
            namespace=meta["namespace"],
            settings=backup,
            db_path=f"{data_dir}/{db_file}",
            data_volume=DATA_VOLUME,
            data_mount=data_dir,
            pvc_name=claim_name if claim is not None else None,
            backup_claim=backup_volume.claim_name(backup.nfs),
            identity_fingerprint=identity_fingerprint,
            backup_key=backup_key,
            require_backup=require_backup,
            allow_empty_start=allow_empty_start,
            upgrade_version=upgrade_version,
            upgrade_scratch_size=str(int(3 * quantity_value(size))),
            signer_scratch_size=str(int(4 * quantity_value(size))),
            metrics_port=LITESTREAM_METRICS_PORT if metrics else None,
            record_position=record_position,
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    rehearsal = None
    if backup.rehearsal.enabled:
        rehearsal = RestoreRehearsal(
            f"{name}-rehearsal",
            rehearsal_args(litestream.args, cluster=cluster, scratch_size=size),
            opts=pulumi.ResourceOptions(parent=parent),
        )
    return ReplicatedSqlite(volume=volume, claim=claim, backup=litestream, rehearsal=rehearsal)


def rehearsal_args(
    backup: LitestreamBackupArgs, *, cluster: ClusterSettings, scratch_size: str
) -> RestoreRehearsalArgs:
    """The rehearsal of the Litestream backup ``backup``: on the schedule of its ``settings.rehearsal``, with the
    restore's image and resources, placed by ``cluster``, with room for a restored copy of the database
    (``scratch_size``), and with the restore's manifest checks when the backup is signed."""
    settings = backup.settings
    return RestoreRehearsalArgs(
        app=backup.app,
        namespace=backup.namespace,
        image=settings.litestream.image,
        backup_claim=backup.backup_claim,
        schedule=settings.rehearsal.schedule,
        max_age_seconds=int(parse_go_duration(settings.rehearsal.max_age, argument="maxAge") // 1_000_000_000),
        resources=settings.litestream.restore_resources,
        cluster=cluster,
        scratch_size=scratch_size,
        backup_key_secret=backup_key_secret(backup.app) if backup.backup_key is not None else None,
        manifest_max_age_seconds=duration_seconds(settings.auth.max_age, argument="backup.auth.maxAge"),
    )
