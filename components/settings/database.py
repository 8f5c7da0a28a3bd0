"""The database stage and the PostgreSQL side of it: the CloudNativePG cluster, its WAL archive, the migration Job."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from headscale_ha.components.config_types import HostAddress, HttpsUrl, Image, PostgresImage, Quantity
from headscale_ha.components.settings.base import ComputeResources, DatabaseStage, SettingsModel, default_resources


class ObjectStore(SettingsModel):
    destination_path: str = Field(
        pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?$",
        description="Barman destination, `s3://bucket/path`.",
    )
    endpoint_url: HttpsUrl | None = Field(
        default=None, description="S3 endpoint for non-AWS stores (e.g. Ceph RGW, MinIO)."
    )
    retention: str = Field(default="30d", pattern=r"^[1-9][0-9]*[dwm]$", description="Backup retention, e.g. 30d, 4w.")


class ReplicaSource(StrEnum):
    ARCHIVE = "archive"
    STREAMING = "streaming"


class PostgresSettings(SettingsModel):
    instances: int = Field(default=1, ge=1, le=9, description="CNPG instances (one primary + replicas), one per node.")
    replica_source: ReplicaSource = Field(
        default=ReplicaSource.ARCHIVE,
        description="How a standby's replica cluster follows the active one: `archive` (the shared WAL archive) or "
        "`streaming` (replication connection to `streamingHost`, plus the archive as fallback).",
    )
    streaming_host: HostAddress | None = Field(
        default=None,
        description="Address of the active cluster's PostgreSQL as the standby reaches it (e.g. through the tailnet "
        "gateway); required for `streaming`. The active cluster's TLS Secrets `headscale-db-replication` and "
        "`headscale-db-ca` must be copied to the standby's namespace as `active-db-replication` and `active-db-ca`.",
    )
    resources: ComputeResources = Field(
        default_factory=default_resources("100m", "256Mi", "1", "1Gi"), description="Resources of each instance."
    )
    image: PostgresImage = Field(
        default="ghcr.io/cloudnative-pg/postgresql:15.18", description="PostgreSQL operand image."
    )
    storage_size: Quantity = Field(default="5Gi", description="Volume size per instance.")
    backup_schedule: str = Field(default="0 0 3 * * *", description="ScheduledBackup cron (six fields, seconds first).")
    object_store: ObjectStore | None = Field(
        default=None, description="WAL archive and base backups; required in the postgres stage."
    )


class MigrationSettings(SettingsModel):
    """The SQLite → PostgreSQL Job of the migrating stage."""

    image: Image | None = Field(
        default=None,
        description="Image with python, psql, pgloader and this repository's `migration` package "
        "(built from images/migrate/Dockerfile); required in the migrating stage.",
    )
    force: bool = Field(
        default=False,
        description="Wipe a target that already holds data, or that an earlier run left unverified, before loading.",
    )
    deadline_seconds: int = Field(default=3600, ge=60, le=86400, description="The Job fails after this long.")


class DatabaseSettings(SettingsModel):
    stage: DatabaseStage = Field(
        default=DatabaseStage.SQLITE, description="`sqlite`, `migrating` or `postgres` (see the design)."
    )
    postgres: PostgresSettings = Field(default_factory=PostgresSettings, description="The CloudNativePG cluster.")
    migration: MigrationSettings = Field(default_factory=MigrationSettings, description="The migration Job.")
