"""SqliteToPostgres: the migrating stage's Job, awaited by Pulumi while Headscale is scaled to 0.

Steps, each failing the Job with its own message and none touching SQLite or its backup:
1. `restore` (Litestream image, the same restore script and identity contract as the restore init container;
   the NFS backup mounted read-only; a standby-like `REQUIRE_BACKUP`): the latest replica into scratch storage.
2. `schema` (the pinned Headscale image, `configtest` with the database settings overridden to PostgreSQL):
   Headscale creates its own schema in the empty target.
3. `migrate` (the migration image, `python -m migration run`): preflight on the copy, refuse a non-empty target
   unless forced, pgloader, then verification of counts, keys, sequences, migrations and checksums.
4. `smoke` (the Headscale image again, `configtest` against the loaded database): Headscale opens it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.backup_volume import claim_name
from components.headscale import APP, IDENTITY_MOUNT, server_files
from components.headscale_config import PASSWORD_ENV, HeadscalePaths
from components.litestream import BACKUP_MOUNT, BACKUP_VOLUME, CONFIG_FILE, CONFIG_MOUNT, SCRIPT_FILE, backup_mount
from components.pod import checksum, container_security, labels, pod_security, resources, scheduling
from components.postgres import CLUSTER, DATABASE, OWNER, app_secret, read_write_host
from program.config import StackConfig

PATHS = HeadscalePaths()
JOB = "headscale-migrate"


@dataclass(frozen=True, kw_only=True)
class SqliteToPostgresArgs:
    config: StackConfig
    namespace: str


def database_env(namespace: str) -> list[dict[str, Any]]:
    """Headscale's database settings pointed at the CNPG cluster (environment overrides of config.yaml)."""
    return [
        {"name": "HEADSCALE_DATABASE_TYPE", "value": "postgres"},
        {"name": "HEADSCALE_DATABASE_POSTGRES_HOST", "value": read_write_host(namespace)},
        {"name": "HEADSCALE_DATABASE_POSTGRES_PORT", "value": "5432"},
        {"name": "HEADSCALE_DATABASE_POSTGRES_NAME", "value": DATABASE},
        {"name": "HEADSCALE_DATABASE_POSTGRES_USER", "value": OWNER},
        {"name": "HEADSCALE_DATABASE_POSTGRES_SSL", "value": "require"},
        {"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {"name": app_secret(), "key": "password"}}},
    ]


class SqliteToPostgres(pulumi.ComponentResource):
    """The migration Job; see the module docstring."""

    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: SqliteToPostgresArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:migration:SqliteToPostgres", name, None, opts)
        config, namespace = args.config, args.namespace
        migration = config.database.migration
        if migration.image is None or config.backup.nfs is None:
            raise ValueError("database.migration.image and backup.nfs are required (checked by the config)")
        db_path = f"{PATHS.data_dir}/db.sqlite"
        litestream = config.backup.litestream
        scratch = {"name": "scratch", "mountPath": PATHS.data_dir}
        # configtest loads the server's config.yaml: every file it names (identity, OIDC secret) must be mounted.
        file_volumes, file_mounts = server_files(config)
        backup_claim = claim_name(config.backup.nfs)
        restore = {
            "name": "restore",
            "image": litestream.image,
            "command": ["/bin/sh", SCRIPT_FILE],
            "env": [
                {"name": "DB_PATH", "value": db_path},
                {"name": "BACKUP_DIR", "value": f"{BACKUP_MOUNT}/{APP}"},
                {"name": "LITESTREAM_CONFIG", "value": CONFIG_FILE},
                {"name": "IDENTITY_FILE", "value": PATHS.noise_key},
                {"name": "REQUIRE_BACKUP", "value": "true"},
            ],
            "volumeMounts": [
                scratch,
                backup_mount(APP, read_only=True),
                {"name": "litestream-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                IDENTITY_MOUNT,
                {"name": "tmp", "mountPath": "/tmp"},
            ],
            "resources": resources(litestream.resources),
            "securityContext": container_security(),
        }
        schema = {
            "name": "schema",
            "image": config.headscale.image,
            "args": ["configtest"],
            "env": database_env(namespace),
            "volumeMounts": [
                *file_mounts,
                {"name": "run", "mountPath": PATHS.run_dir},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
            "resources": resources(config.headscale.resources),
            "securityContext": container_security(),
        }
        run_args = ["run", "--sqlite", db_path, "--version", config.headscale.version, "--workdir", "/work"]
        migrate = {
            "name": "migrate",
            "image": migration.image,
            "command": ["python", "-m", "migration"],
            "args": [*run_args, *(["--force"] if migration.force else [])],
            "env": [
                {
                    "name": "MIGRATION_PG_URL",
                    "value": f"postgresql://{OWNER}@{read_write_host(namespace)}:5432/{DATABASE}",
                },
                {"name": "PGSSLMODE", "value": "require"},
                {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": app_secret(), "key": "password"}}},
            ],
            "volumeMounts": [scratch, {"name": "work", "mountPath": "/work"}, {"name": "tmp", "mountPath": "/tmp"}],
            "resources": resources(config.headscale.resources),
            "securityContext": container_security(),
        }
        volumes = [
            {"name": "scratch", "emptyDir": {"sizeLimit": "4Gi"}},
            {"name": "work", "emptyDir": {"sizeLimit": "8Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
            {"name": BACKUP_VOLUME, "persistentVolumeClaim": {"claimName": backup_claim, "readOnly": True}},
            {"name": "litestream-config", "configMap": {"name": "headscale-litestream", "defaultMode": 0o444}},
            *file_volumes,
        ]  # fmt: skip
        # A new Job (new name) for every change of what it would do; a finished one is kept for the record.
        digest = checksum(config.headscale.version, migration.image, str(migration.force))[:8]
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": f"{JOB}-{digest}", "namespace": namespace, "labels": labels(JOB, "migration")},
            spec={
                "backoffLimit": 0,
                "activeDeadlineSeconds": migration.deadline_seconds,
                "template": {
                    "metadata": {"labels": labels(JOB, "migration")},
                    "spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": pod_security(),
                        **scheduling(config.cluster),
                        "initContainers": [restore, schema, migrate],
                        "containers": [{**schema, "name": "smoke"}],
                        "volumes": volumes,
                    },
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self, custom_timeouts=pulumi.CustomTimeouts(create=f"{migration.deadline_seconds + 300}s")
            ),
        )
        self.register_outputs({"job": f"{namespace}/{JOB}-{digest}", "cluster": CLUSTER})
