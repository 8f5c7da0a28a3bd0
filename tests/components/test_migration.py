"""SqliteToPostgres: the migrating stage's Job (restore → schema → migrate → smoke), awaited with Headscale at 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.headscale import PostgresStorage
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.migration import database_env
from headscale_ha.components.settings import Nfs
from headscale_ha.policy.pack.rules import Subject, violations
from headscale_ha.program.args import sqlite_to_postgres_args
from headscale_ha.program.config import ConfigError
from tests.support.config_samples import STORE, STORE_KEYS, parse
from tests.support.manifest_validator import validate
from tests.support.stack_snippets import POSTGRES
from tools.plan import write_rendered

MIGRATION_IMAGE = "registry.example.com/headscale-ha/migrate:1.0.0"
MIGRATING = POSTGRES.replace("stage: postgres", "stage: migrating").replace(
    '      objectStore: {destinationPath: "s3://headscale-wal/hydra", endpointUrl: "https://s3.internal.example.com"}\n',
    '      objectStore: {destinationPath: "s3://headscale-wal/hydra", endpointUrl: "https://s3.internal.example.com"}\n'
    '    migration: {image: "registry.example.com/headscale-ha/migrate:1.0.0"}\n',
)

#: The backup claim of the shared config's NFS source (Pulumi.yaml).
BACKUP_CLAIM = claim_name(Nfs(server="nfs.internal.example.com", path="/export/headscale-backup"))


@pytest.fixture
def migrating_run(run_stack, lab_project):
    return run_stack("lab", project_dir=lab_project(MIGRATING))


def _job(run) -> dict:
    (job,) = [o for o in run.kubernetes_objects() if o["kind"] == "Job"]
    return job


def test_headscale_is_stopped_and_its_sqlite_kept(migrating_run) -> None:
    objects = migrating_run.kubernetes_objects()
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "headscale")
    assert deployment["spec"]["replicas"] == 0
    # The rollback point is the Litestream replica, which the Job only reads (disposable storage keeps no claim).
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    assert claims == {BACKUP_CLAIM}
    assert [o["kind"] for o in objects].count("Cluster") == 1


def test_the_job_restores_creates_the_schema_then_migrates(migrating_run) -> None:
    job = _job(migrating_run)
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    restore, schema, migrate = pod["initContainers"]
    (smoke,) = pod["containers"]
    assert (smoke["name"], smoke["args"], smoke["image"]) == ("smoke", ["configtest"], schema["image"])
    env = {e["name"]: e.get("value") for e in restore["env"]}
    assert env["REQUIRE_BACKUP"] == "true"
    assert env["DB_PATH"] == "/var/lib/headscale/db.sqlite"
    backup = next(v for v in pod["volumes"] if v["name"] == "backup")
    assert backup["persistentVolumeClaim"] == {"claimName": BACKUP_CLAIM, "readOnly": True}
    mount = next(m for m in restore["volumeMounts"] if m["name"] == "backup")
    assert mount == {"name": "backup", "mountPath": "/backup/headscale", "subPath": "headscale", "readOnly": True}
    assert schema["args"] == ["configtest"]
    assert schema["image"] == "ghcr.io/juanfont/headscale:0.29.2"
    schema_env = {e["name"]: e for e in schema["env"]}
    assert schema_env["HEADSCALE_DATABASE_TYPE"]["value"] == "postgres"
    assert schema_env["HEADSCALE_DATABASE_POSTGRES_PASS"]["valueFrom"]["secretKeyRef"]["name"] == "headscale-db-owner"
    assert migrate["command"] == ["python", "-m", "migration"]
    assert migrate["args"][:5] == ["run", "--sqlite", "/var/lib/headscale/db.sqlite", "--version", "0.29.2"]
    assert "--force" not in migrate["args"]
    migrate_env = {e["name"]: e for e in migrate["env"]}
    assert "value" not in migrate_env["PGPASSWORD"], "the password only ever comes from the CNPG Secret"
    assert "@" in migrate_env["MIGRATION_PG_URL"]["value"]
    assert ":" not in migrate_env["MIGRATION_PG_URL"]["value"].split("@")[0].removeprefix("postgresql://")


def test_every_step_that_connects_verifies_the_server(migrating_run) -> None:
    """schema and smoke (Headscale's pgx: its ssl setting and PGSSLROOTCERT) and migrate (psql and pgloader, from
    the URL) all check the server against the cluster's CA, mounted read-only without its private key."""
    pod = _job(migrating_run)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "postgres-ca"]
    assert volume["secret"]["secretName"] == "headscale-db-ca"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    ca_mount = {"name": "postgres-ca", "mountPath": "/etc/headscale/postgres-ca", "readOnly": True}
    restore, schema, migrate = pod["initContainers"]
    (smoke,) = pod["containers"]
    assert ca_mount not in restore["volumeMounts"], "the restore step never connects to PostgreSQL"
    for container in (schema, smoke):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HEADSCALE_DATABASE_POSTGRES_SSL"] == "verify-full"
        assert env["PGSSLROOTCERT"] == "/etc/headscale/postgres-ca/ca.crt"
        assert ca_mount in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in migrate["env"]}
    assert env["MIGRATION_PG_URL"] == (
        "postgresql://headscale@headscale-db-rw.headscale.svc.cluster.local:5432/headscale"
        "?sslmode=verify-full&sslrootcert=/etc/headscale/postgres-ca/ca.crt"
    )
    assert "PGSSLMODE" not in env, "the tool sets psql's PG* variables itself, from the URL"
    assert ca_mount in migrate["volumeMounts"]


def test_the_job_passes_the_guard_rails_and_the_schemas(migrating_run, shared_dir: Path, tmp_path: Path) -> None:
    job = next(r for r in migrating_run.resources if r.type == "kubernetes:batch/v1:Job")
    assert violations(Subject(type=job.type, name=job.name, props=job.inputs)) == {}
    files = [f for f in write_rendered(migrating_run, tmp_path) if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout


def test_the_migrating_stage_needs_a_migration_image(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"database\.migration\.image: is required in the migrating stage"):
        run_stack("lab", project_dir=lab_project(POSTGRES.replace("stage: postgres", "stage: migrating")))


def test_the_args_point_the_job_at_this_stacks_backup_and_cnpg_cluster() -> None:
    database = {"stage": "migrating", "postgres": {"objectStore": STORE}, "migration": {"image": MIGRATION_IMAGE}}
    config = parse("hydra", secret_keys=tuple(STORE_KEYS), database=database, **STORE_KEYS)
    args = sqlite_to_postgres_args(config)
    assert (args.image, args.force, args.deadline_seconds) == (MIGRATION_IMAGE, False, 3600)
    assert args.backup_claim == BACKUP_CLAIM
    assert args.target.connection.host == "headscale-db-rw.headscale.svc.cluster.local"
    assert args.target.password_secret == "headscale-db-owner"
    assert (args.headscale_version, args.oidc) == ("0.29.2", False)
    without_image = config.database.model_copy(
        update={"migration": config.database.migration.model_copy(update={"image": None})}
    )
    with pytest.raises(ValueError, match=r"migration\.image"):
        sqlite_to_postgres_args(config.model_copy(update={"database": without_image}))


def test_the_database_settings_follow_the_target() -> None:
    target = PostgresStorage(
        connection=PostgresConnection(host="pg", port=6432, name="vpn", user="vpn_app", ssl="verify-full"),
        password_secret="vpn-db",
        password_key="pass",
    )
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in database_env(target)}
    assert env["HEADSCALE_DATABASE_POSTGRES_PORT"] == "6432"
    assert env["HEADSCALE_DATABASE_POSTGRES_SSL"] == "verify-full"
    assert env["HEADSCALE_DATABASE_POSTGRES_PASS"] == {"secretKeyRef": {"name": "vpn-db", "key": "pass"}}


def test_an_unknown_tls_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"ssl 'verify': expected one of disable, .*verify-full"):
        PostgresConnection(host="pg", name="hs", user="hs", ssl="verify")
    assert PostgresConnection(host="pg", name="hs", user="hs").ssl == "verify-full", "verifying is the default"
