"""How each SQLite database is kept: the NFS target, the Litestream sidecar, local storage, rehearsals, signed
backups and the optional VolSync snapshots."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from headscale_ha.components.config_types import AbsolutePath, Duration, HostAddress, Image, Quantity
from headscale_ha.components.settings.base import (
    ComputeResources,
    SettingsModel,
    default_resources,
    go_duration_in_range,
    override_date,
)


class Nfs(SettingsModel):
    """Where the Litestream replicas live. Pods reach it only through a claim: `restricted` admits no `nfs:` volume."""

    server: HostAddress | None = Field(
        default=None,
        description="NFS server (name or IP) of the static PersistentVolume; required unless `storageClass` is set.",
    )
    path: AbsolutePath | None = Field(
        default=None,
        description="Exported directory of the static PersistentVolume; each application replicates to its own "
        "subdirectory (`headscale`, `headplane`), which must exist and be writable by UID 65532.",
    )
    storage_class: str | None = Field(
        default=None,
        min_length=1,
        description="StorageClass that provisions the backup claim (e.g. csi-driver-nfs) instead of a static "
        "nfs PersistentVolume; a standby restores only if the class maps both sites to the same directory.",
    )
    size: Quantity = Field(default="10Gi", description="Capacity of the backup volume and claim.")

    @property
    def export(self) -> tuple[str, str] | None:
        """(server, path) of the static PersistentVolume; None when a StorageClass provisions the claim."""
        if self.server is None or self.path is None:
            return None
        return self.server, self.path

    @model_validator(mode="after")
    def _one_source(self) -> Nfs:
        if self.storage_class is None and (self.server is None or self.path is None):
            raise ValueError("server and path are required for the static nfs PersistentVolume (or set storageClass)")
        if self.storage_class is not None and (self.server is not None or self.path is not None):
            raise ValueError("storageClass provisions the volume: leave server and path to the StorageClass")
        return self


class LitestreamSettings(SettingsModel):
    """The Litestream sidecar that replicates each SQLite database, and its restore."""

    image: Image = Field(default="docker.io/litestream/litestream:0.5.17", description="Litestream image.")
    sync_interval: Duration = Field(default="1s", description="How often WAL changes are shipped to the replica.")
    retention: Duration = Field(default="168h", description="How long snapshots and WAL segments are kept.")
    resources: ComputeResources = Field(
        default_factory=default_resources("10m", "32Mi", "200m", "128Mi"), description="Sidecar resources."
    )
    restore_resources: ComputeResources = Field(
        default_factory=default_resources("100m", "64Mi", "2", "256Mi"),
        description="Resources of the restore (init container, and the rehearsal Job). Restoring costs about 1 "
        "CPU-second per 100 MB and uses more than one core: under the sidecar's 200m limit it takes 5.6 times "
        "longer (`make bench`). An init container's request does not add to the pod's steady-state request.",
    )

    @field_validator("sync_interval", "retention")
    @classmethod
    def _positive(cls, duration: str) -> str:
        return go_duration_in_range(
            duration, above="0s", reason="Litestream refuses to start with a zero sync interval or retention"
        )


class VolSyncSettings(SettingsModel):
    """A second, independent backup: restic snapshots of the SQLite volumes."""

    repository: str = Field(min_length=1, description="Secret (in the namespace) holding the restic repository config.")
    schedule: str = Field(default="0 */6 * * *", description="Snapshot cron (five fields).")
    keep_daily: int = Field(default=7, ge=1, le=365, description="Daily snapshots kept.")
    keep_weekly: int = Field(default=4, ge=0, le=104, description="Weekly snapshots kept.")
    volume_snapshot_class: str | None = Field(default=None, description="VolumeSnapshotClass; default: the cluster's.")


class LocalStorage(StrEnum):
    """Where a SQLite database lives while its application runs (the NFS replica is the durable copy)."""

    DISPOSABLE = "disposable"
    """A volume that lives and dies with the pod; every start restores from the backup."""
    PERSISTENT = "persistent"
    """A retained PersistentVolumeClaim that keeps the database across restarts; each start checks it first."""


class LocalVolumeSettings(SettingsModel):
    """The application's own copy of its database: Headscale's in the sqlite stage, Headplane's always."""

    storage: LocalStorage = Field(
        default=LocalStorage.DISPOSABLE,
        description="`disposable`: an emptyDir (or a generic ephemeral volume of `ephemeralStorageClass`) per pod; a "
        "replacement pod starts on any eligible node and restores from the backup with no volume to detach; a node "
        "loss loses at most the unreplicated tail (about `syncInterval` + 1s), a graceful stop nothing. "
        "`persistent`: a retained PVC of `cluster.storageClass`; a node loss loses nothing, but an RWO volume stays "
        "attached to the dead node for about 6 minutes before the pod can start elsewhere. See `recovery`.",
    )
    ephemeral_storage_class: str | None = Field(
        default=None,
        min_length=1,
        description="`disposable` only: StorageClass (node-local, e.g. local-path) of a generic ephemeral volume per "
        "pod, deleted with the pod; default: an emptyDir on the node's disk, capped at the storage size.",
    )

    @model_validator(mode="after")
    def _ephemeral_class_is_disposable(self) -> LocalVolumeSettings:
        if self.ephemeral_storage_class is not None and self.storage is LocalStorage.PERSISTENT:
            raise ValueError(
                "ephemeralStorageClass applies to disposable storage only; "
                "a persistent volume uses cluster.storageClass"
            )
        return self


class RehearsalSettings(SettingsModel):
    """A CronJob per application that restores the latest replica into scratch and checks it, read-only."""

    enabled: bool = Field(default=True, description="Run the restore rehearsal CronJobs.")
    schedule: str = Field(
        default="17 4 * * *",
        pattern=r"^\S+( \S+){4}$",
        description="Cron schedule (five fields, the cluster's time zone).",
    )
    max_age: Duration = Field(
        default="168h",
        description="The rehearsal fails when the replica's newest transaction is older: replication stopped, or the "
        "database was idle that long (a quiet tailnet writes rarely; raise it rather than ignore failures).",
    )

    @field_validator("max_age")
    @classmethod
    def _positive_age(cls, duration: str) -> str:
        return go_duration_in_range(duration, above="0s", reason="a zero age fails every rehearsal")


class BackupAuthSettings(SettingsModel):
    """Authenticated backups: the restore (and the rehearsal) refuse a replica this tailnet's key did not sign."""

    max_age: Duration = Field(
        default="24h",
        description="The restore refuses a replica whose manifest was signed longer ago (exit 44): the signer "
        "re-signs at least every minute while the application runs, so an older one is a rollback (an NFS snapshot, "
        "a copied old directory) or a writer stopped that long. A day by default, so that a promotion the day the "
        "active is lost, or a cluster's restart after a night down, needs no override; lower it to catch younger "
        "rollbacks, at the price of `allowStale` after every longer stop.",
    )
    allow_unsigned: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica without a manifest or "
        "signed with another key (exits 40/41): the first rollout after upgrading to signed backups on disposable "
        "storage, a rotation of the backup key (`keyEpoch`) or of the identity. Inert on any other day; remove it "
        "afterwards.",
    )
    allow_stale: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a manifest older than `maxAge` "
        "(exit 44), after checking the application was really stopped that long. Inert on any other day.",
    )
    key_epoch: int = Field(
        default=1,
        ge=1,
        description="The backup key is derived from the tailnet's Noise key and this number: the same on every site "
        "(set it in Pulumi.yaml, for all stacks); raise it to rotate the key (with `allowUnsigned` for that day).",
    )
    record_position: bool = Field(
        default=True,
        description="Headscale's running pod records the position its signer last signed in the served witness "
        "(outside the export) through a `position-recorder` sidecar with its own ServiceAccount (get/patch on that one "
        "ConfigMap), and the restore refuses a replica signed below it (exit 44): a rollback younger than `maxAge` "
        "is caught too. Needs the API server reachable from the application's pods (`networkPolicy."
        "apiServerCidrs` under default-deny egress). `false`: rollbacks are caught by `maxAge` alone.",
    )
    recorder_image: Image = Field(
        default="docker.io/curlimages/curl:8.16.0",
        description="Image of the position recorder (a shell and curl: components/scripts/position-recorder.sh).",
    )
    allow_rollback: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica signed below the "
        "recorded position (exit 44), after a deliberate return to an older copy of the backup, or a served site "
        "whose witness holds no recorded position (exit 44: the position recorder never could write it). Inert on "
        "any other day; remove it afterwards.",
    )

    @field_validator("allow_unsigned", "allow_stale", "allow_rollback", mode="before")
    @classmethod
    def _utc_date(cls, value: object) -> object:
        return override_date(value)

    @field_validator("max_age")
    @classmethod
    def _positive_age(cls, duration: str) -> str:
        return go_duration_in_range(duration, above="0s", reason="a zero age refuses every restore")


class BackupSettings(SettingsModel):
    """Where and how each SQLite database is backed up, restored and checked."""

    nfs: Nfs | None = Field(
        default=None, description="NFS target of the Litestream replicas; required in the sqlite and migrating stages."
    )
    litestream: LitestreamSettings = Field(default_factory=LitestreamSettings, description="Litestream settings.")
    local: LocalVolumeSettings = Field(
        default_factory=LocalVolumeSettings, description="Where each SQLite database lives locally."
    )
    rehearsal: RehearsalSettings = Field(default_factory=RehearsalSettings, description="Scheduled restore rehearsals.")
    auth: BackupAuthSettings = Field(
        default_factory=BackupAuthSettings, description="Authenticated backups (docs/security.md)."
    )
    volsync: VolSyncSettings | None = Field(
        default=None, description="Optional VolSync ReplicationSource per SQLite volume."
    )

    @model_validator(mode="after")
    def _volsync_needs_a_claim(self) -> BackupSettings:
        if self.volsync is not None and self.local.storage is LocalStorage.DISPOSABLE:
            raise ValueError(
                "volsync snapshots a PersistentVolumeClaim: set local.storage to persistent, or remove volsync "
                "(disposable storage keeps no claim; Litestream's replica is the copy)"
            )
        return self
