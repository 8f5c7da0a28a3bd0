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

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.batch.v1 import JobSpecArgs, JobSpecArgsDict
from pulumi_kubernetes.core.v1 import (
    ConfigMapVolumeSourceArgsDict,
    ContainerArgsDict,
    EnvVarArgsDict,
    EnvVarSourceArgsDict,
    KeyToPathArgsDict,
    PodSpecArgsDict,
    VolumeArgsDict,
    VolumeMountArgsDict,
)

from headscale_ha.components.api_spelling import api_spelled
from headscale_ha.components.headscale import (
    APP,
    IDENTITY_MOUNT,
    IDENTITY_VOLUME,
    PASSWORD_ENV_REASON,
    POSTGRES_CA_FILE,
    PolicyFile,
    PostgresStorage,
    postgres_ca,
    server_files,
)
from headscale_ha.components.headscale_config import PASSWORD_ENV, HeadscalePaths
from headscale_ha.components.litestream import (
    BACKUP_KEY_FILE,
    BACKUP_KEY_VOLUME_MOUNT,
    BACKUP_MOUNT,
    BACKUP_VOLUME,
    CONFIG_FILE,
    CONFIG_MOUNT,
    MANIFEST_SCRIPT_FILE,
    SCRIPT_FILE,
    SERVED_FILE,
    SERVED_KEY,
    SERVED_MOUNT,
    SERVED_VOLUME,
    backup_key_secret,
    backup_key_volume,
    backup_mount,
    served_config_map,
)
from headscale_ha.components.litestream_config import duration_seconds
from headscale_ha.components.pod import (
    checksum,
    container_security,
    labels,
    pod_security,
    resources,
    scheduling,
    static_check_skips,
)
from headscale_ha.components.position_recorder import WITNESS_KEY
from headscale_ha.components.settings import BackupAuthSettings, ClusterSettings, ComputeResources

PATHS = HeadscalePaths()
JOB = "headscale-migrate"
#: The ConfigMap with litestream.yml and the restore script: the one HeadscaleServer's backup (app `headscale`) owns.
RESTORE_CONFIG_MAP = f"{APP}-litestream"
#: Where the restore step puts the database, and the migrate step reads it: the scratch volume.
DB_PATH = f"{PATHS.data_dir}/db.sqlite"
SCRATCH_MOUNT: VolumeMountArgsDict = {"name": "scratch", "mount_path": PATHS.data_dir}
#: configtest creates the Noise (and DERP) key when its file is missing: the schema and smoke steps get throwaway
#: keys in their own /tmp, so the Job never mounts the identity Secret's private keys (configtest opens no client
#: connection; the keys are not stored in the database).
MAX_AGE_KEY = "backup.auth.maxAge"
THROWAWAY_KEYS_ENV: list[EnvVarArgsDict] = [
    {"name": "HEADSCALE_NOISE_PRIVATE_KEY_PATH", "value": "/tmp/throwaway/noise_private.key"},
    {"name": "HEADSCALE_DERP_SERVER_PRIVATE_KEY_PATH", "value": "/tmp/throwaway/derp_server_private.key"},
]


@dataclass(frozen=True, kw_only=True)
class SqliteToPostgresArgs:
    """One migration run: where the SQLite backup is, which PostgreSQL database to load, and with which images."""

    namespace: str  # Headscale's namespace: its identity Secret, config, Litestream ConfigMap and backup claim
    image: str  # the migration image (python, psql, pgloader and this repository's `migration` package)
    force: bool = False  # wipe a target that already holds data before loading
    deadline_seconds: int = 3600  # the Job fails after this long; Pulumi waits 300 s more for it
    headscale_image: str  # the server's image: the schema and smoke steps run its `configtest`
    headscale_version: str  # the server's release: which schema and migrations the load is checked against
    resources: ComputeResources  # requests and limits of the schema, migrate and smoke steps
    restore_image: str  # the Litestream image of the restore step
    restore_resources: ComputeResources  # requests and limits of the restore step
    backup_claim: str  # claim of the NFS export; the restore reads its `headscale` directory, read-only
    target: PostgresStorage  # the database to load, and the Secret with its user's password
    oidc: bool = False  # the server's config has an OIDC block: configtest needs its client-secret file mounted
    policy: PolicyFile | None = None  # the server's config is in policy file mode: configtest loads that file too
    cluster: ClusterSettings  # placement of the Job's pod
    #: Restore only a replica this tailnet's backup key signed (the Secret `headscale-backup-key` of Headscale's
    #: backup, which the migrating stage keeps); False: no authentication, and the restore checks the Noise key's
    #: fingerprint instead (the only step that then mounts the identity Secret).
    authenticate: bool = False
    #: With ``authenticate``: the age limit and the dated overrides of ``backup.auth``, and the position the running
    #: pod recorded in the served witness, checked as the pod's restore checks them; None: the defaults.
    auth: BackupAuthSettings | None = None


def target_url(target: PostgresStorage) -> str:
    """The migration tool's target: libpq URL with the TLS mode and the mounted CA (no password: PGPASSWORD).
    The tool hands sslmode/sslrootcert to psql, and to pgloader in the form pgloader understands."""
    connection = target.connection
    url = f"postgresql://{connection.user}@{connection.host}:{connection.port}/{connection.name}"
    query = f"?sslmode={connection.ssl}"
    if target.ca_secret is not None:
        query += f"&sslrootcert={POSTGRES_CA_FILE}"
    return url + query


def database_env(target: PostgresStorage) -> list[EnvVarArgsDict]:
    """Headscale's database settings pointed at the target (environment overrides of config.yaml), with the CA
    its pgx driver verifies the server against (PGSSLROOTCERT)."""
    connection = target.connection
    password: EnvVarSourceArgsDict = {"secret_key_ref": {"name": target.password_secret, "key": target.password_key}}
    return [
        {"name": "HEADSCALE_DATABASE_TYPE", "value": "postgres"},
        {"name": "HEADSCALE_DATABASE_POSTGRES_HOST", "value": connection.host},
        {"name": "HEADSCALE_DATABASE_POSTGRES_PORT", "value": str(connection.port)},
        {"name": "HEADSCALE_DATABASE_POSTGRES_NAME", "value": connection.name},
        {"name": "HEADSCALE_DATABASE_POSTGRES_USER", "value": connection.user},
        {"name": "HEADSCALE_DATABASE_POSTGRES_SSL", "value": connection.ssl},
        {"name": PASSWORD_ENV, "value_from": password},
        *postgres_ca(target)[2],
    ]


def _restore_step(args: SqliteToPostgresArgs) -> ContainerArgsDict:
    """Step 1: the latest replica into the scratch volume, as the restore init container restores it (REQUIRE_BACKUP),
    from the backup mounted read-only. With ``authenticate``: only a signed replica, no older than backup.auth.maxAge
    and not below the position recorded in the served witness, and no private key (the signature binds the replica
    to this tailnet's key, which the fingerprint check only approximates); without: the identity fingerprint."""
    env: list[EnvVarArgsDict] = [
        {"name": "DB_PATH", "value": DB_PATH},
        {"name": "BACKUP_DIR", "value": f"{BACKUP_MOUNT}/{APP}"},
        {"name": "LITESTREAM_CONFIG", "value": CONFIG_FILE},
        {"name": "REQUIRE_BACKUP", "value": "true"},
    ]
    mounts: list[VolumeMountArgsDict] = [
        SCRATCH_MOUNT,
        backup_mount(APP, read_only=True),
        {"name": "litestream-config", "mount_path": CONFIG_MOUNT, "read_only": True},
        {"name": "tmp", "mount_path": "/tmp"},
    ]
    restore: ContainerArgsDict = {
        "name": "restore",
        "image": args.restore_image,
        "command": ["/bin/sh", SCRIPT_FILE],
        "env": env,
        "volume_mounts": mounts,
        "resources": resources(args.restore_resources),
        "security_context": container_security(),
    }
    if not args.authenticate:
        env.append({"name": "IDENTITY_FILE", "value": PATHS.noise_key})
        mounts.append(IDENTITY_MOUNT)
        return restore
    auth = args.auth or BackupAuthSettings()
    env.extend(
        [
            {"name": "BACKUP_KEY_FILE", "value": BACKUP_KEY_FILE},
            {"name": "MANIFEST_SCRIPT", "value": MANIFEST_SCRIPT_FILE},
            {
                "name": "MAX_REPLICA_AGE_SECONDS",
                "value": str(duration_seconds(auth.max_age, argument="backup.auth.maxAge")),
            },
            {"name": "SERVED_FILE", "value": SERVED_FILE},
            *(
                [{"name": "POSITION_WITNESS_FILE", "value": f"{SERVED_MOUNT}/{WITNESS_KEY}"}]
                if auth.record_position
                else []
            ),
            *([{"name": "ALLOW_UNSIGNED_RESTORE", "value": auth.allow_unsigned}] if auth.allow_unsigned else []),
            *([{"name": "ALLOW_STALE_RESTORE", "value": auth.allow_stale}] if auth.allow_stale else []),
            *([{"name": "ALLOW_ROLLBACK_RESTORE", "value": auth.allow_rollback}] if auth.allow_rollback else []),
        ]
    )
    mounts.extend(
        [
            BACKUP_KEY_VOLUME_MOUNT,
            {"name": SERVED_VOLUME, "mount_path": SERVED_MOUNT, "read_only": True},
        ]
    )
    return restore


def _schema_step(args: SqliteToPostgresArgs) -> ContainerArgsDict:
    """Step 2 (and, renamed `smoke`, step 4): Headscale's `configtest` against the target, which creates its schema
    (then opens the loaded database). configtest loads the server's config.yaml: every file it names (OIDC secret,
    policy) is mounted, and the CA the connection is verified against; the identity keys are throwaway ones."""
    _, file_mounts = server_files(oidc=args.oidc, policy=args.policy)
    _, ca_mounts, _ = postgres_ca(args.target)
    return {
        "name": "schema",
        "image": args.headscale_image,
        "args": ["configtest"],
        "env": [*database_env(args.target), *THROWAWAY_KEYS_ENV],
        "volume_mounts": [
            *(mount for mount in file_mounts if mount != IDENTITY_MOUNT),
            *ca_mounts,
            {"name": "run", "mount_path": PATHS.run_dir},
            {"name": "tmp", "mount_path": "/tmp"},
        ],
        "resources": resources(args.resources),
        "security_context": container_security(),
    }


def _migrate_step(args: SqliteToPostgresArgs) -> ContainerArgsDict:
    """Step 3: the migration tool, from the restored copy into the target (verifying it with the CA, if any)."""
    _, ca_mounts, _ = postgres_ca(args.target)
    password: EnvVarSourceArgsDict = {
        "secret_key_ref": {"name": args.target.password_secret, "key": args.target.password_key}
    }
    run_args = ["run", "--sqlite", DB_PATH, "--version", args.headscale_version, "--workdir", "/work"]
    return {
        "name": "migrate",
        "image": args.image,
        "command": ["python", "-m", "migration"],
        "args": [*run_args, *(["--force"] if args.force else [])],
        "env": [
            # sslmode and sslrootcert travel in the URL: the tool sets every PG* variable of psql itself.
            {"name": "MIGRATION_PG_URL", "value": target_url(args.target)},
            {"name": "PGPASSWORD", "value_from": password},
        ],
        "volume_mounts": [
            SCRATCH_MOUNT,
            {"name": "work", "mount_path": "/work"},
            {"name": "tmp", "mount_path": "/tmp"},
            *ca_mounts,
        ],
        "resources": resources(args.resources),
        "security_context": container_security(),
    }


def _volumes(args: SqliteToPostgresArgs) -> list[VolumeArgsDict]:
    """The pod's volumes: scratch space, the backup (read-only) and its Litestream config, the server's files (the
    identity Secret only for an unauthenticated restore) and the target's CA certificate (nothing when none), and
    the backup key and the served witness when the restore authenticates."""
    file_volumes, _ = server_files(oidc=args.oidc, policy=args.policy)
    if args.authenticate:
        file_volumes = [volume for volume in file_volumes if volume != IDENTITY_VOLUME]
    ca_volumes, _, _ = postgres_ca(args.target)
    return [
        {"name": "scratch", "empty_dir": {"size_limit": "4Gi"}},
        {"name": "work", "empty_dir": {"size_limit": "8Gi"}},
        {"name": "tmp", "empty_dir": {"size_limit": "256Mi"}},
        {"name": "run", "empty_dir": {"medium": "Memory", "size_limit": "8Mi"}},
        {"name": BACKUP_VOLUME, "persistent_volume_claim": {"claim_name": args.backup_claim, "read_only": True}},
        {"name": "litestream-config", "config_map": {"name": RESTORE_CONFIG_MAP, "default_mode": 0o444}},
        *file_volumes,
        *ca_volumes,
        *([backup_key_volume(backup_key_secret(APP)), _witness_volume(args)] if args.authenticate else []),
    ]  # fmt: skip


def _witness_volume(args: SqliteToPostgresArgs) -> VolumeArgsDict:
    """The served witness and its recorded position (optional: each key is absent until written)."""
    items: list[KeyToPathArgsDict] = [{"key": SERVED_KEY, "path": SERVED_KEY}]
    if (args.auth or BackupAuthSettings()).record_position:
        items.append({"key": WITNESS_KEY, "path": WITNESS_KEY})
    witness: ConfigMapVolumeSourceArgsDict = {
        "name": served_config_map(APP),
        "optional": True,
        "default_mode": 0o444,
        "items": items,
    }
    return {"name": SERVED_VOLUME, "config_map": witness}


def migration_pod_spec(args: SqliteToPostgresArgs) -> PodSpecArgsDict:
    """The Job's pod: restore, schema and migrate as init containers, in order, then the smoke test."""
    schema = _schema_step(args)
    return {
        "restart_policy": "Never",
        "automount_service_account_token": False,
        "enable_service_links": False,
        "security_context": pod_security(),
        **scheduling(args.cluster),
        "init_containers": [_restore_step(args), schema, _migrate_step(args)],
        "containers": [{**schema, "name": "smoke"}],
        "volumes": _volumes(args),
    }


class SqliteToPostgres(pulumi.ComponentResource):
    """The migration Job; see the module docstring.

    Outputs (registered; the attribute in brackets holds the same value):
    - ``jobName`` [job_name]: the Job's name, new for every change of what it would do (a finished one is kept).
    """

    job: k8s.batch.v1.Job
    job_name: str

    def __init__(self, name: str, args: SqliteToPostgresArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:migration:SqliteToPostgres", name, None, opts)
        pod_spec = migration_pod_spec(args)
        skips = static_check_skips(pod_spec, {"CKV_K8S_35": PASSWORD_ENV_REASON})
        spec: JobSpecArgsDict = {
            "backoff_limit": 0,
            "active_deadline_seconds": args.deadline_seconds,
            "template": {"metadata": {"labels": labels(JOB, "migration")}, "spec": pod_spec},
        }
        # A Job's template is immutable: any change of it (an image bump, a digest pin) is a new Job, named from
        # all of it, created before the old one is deleted. A re-run against a target an earlier run verified
        # re-verifies and succeeds without loading (migration/__main__.py), so a new Job is harmless. The hash is
        # over the API's spelling, what the cluster gets: the name does not depend on how this module spells it.
        spec_text = json.dumps(api_spelled(spec, JobSpecArgs), sort_keys=True)
        self.job_name = f"{JOB}-{checksum(spec_text, str(args.force))[:8]}"
        timeout = f"{args.deadline_seconds + 300}s"
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={
                "name": self.job_name,
                "namespace": args.namespace,
                "labels": labels(JOB, "migration"),
                # A Job that failed (or never finished) is replaced at the next `pulumi up`, so "fix, then
                # `pulumi up` again" runs it again instead of awaiting the same failed Job.
                "annotations": {**skips, "pulumi.com/replaceUnready": "true"},
            },
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout)
            ),
        )
        self.register_outputs({"jobName": self.job_name})
