"""SqliteToPostgres: the migrating stage's Job (restore → schema → migrate → smoke), awaited with Headscale at 0.

At the component seam: each test builds one SqliteToPostgres from hand-written args (or calls the module's
functions). The stack-level checks (Headscale stopped beside the Job, the ConfigError of a missing
`database.migration.image`, the args a stack's config yields) are in tests/program/test_site_migration.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headscale_ha.components.headscale import PostgresStorage
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.settings import ClusterSettings, ComputeResources, ResourceAmounts
from headscale_ha.components.sqlite_to_postgres import SqliteToPostgres, SqliteToPostgresArgs, database_env
from headscale_ha.guardrails.pack.rules import Subject, violations
from tests.support import api_objects as api
from tests.support.component_run import build_component
from tests.support.manifest_validator import validate
from tools.harness import ProgramRun
from tools.plan import write_rendered

MIGRATION_IMAGE = "registry.example.com/headscale-ha/migrate:1.0.0"
#: The claim of the NFS export the Job restores from (any name: the component takes it as given).
BACKUP_CLAIM = "litestream-headscale-backup"


def _compute(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> ComputeResources:
    return ComputeResources(
        requests=ResourceAmounts(cpu=cpu, memory=memory), limits=ResourceAmounts(cpu=cpu_limit, memory=memory_limit)
    )


#: What program/args.py's sqlite_to_postgres_args yields for a stack in the namespace `headscale`, by hand: the CNPG
#: cluster `headscale-db`'s read-write Service, owner Secret and CA Secret.
ARGS = SqliteToPostgresArgs(
    namespace="headscale",
    image=MIGRATION_IMAGE,
    headscale_image="ghcr.io/juanfont/headscale:0.29.2",
    headscale_version="0.29.2",
    resources=_compute("50m", "128Mi", "1", "512Mi"),
    restore_image="docker.io/litestream/litestream:0.5.17",
    restore_resources=_compute("10m", "32Mi", "200m", "128Mi"),
    backup_claim=BACKUP_CLAIM,
    target=PostgresStorage(
        connection=PostgresConnection(
            host="headscale-db-rw.headscale.svc.cluster.local", name="headscale", user="headscale", ssl="verify-full"
        ),
        password_secret="headscale-db-owner",
        ca_secret="headscale-db-ca",
    ),
    cluster=ClusterSettings(nodes=3),
    authenticate=True,
)


@pytest.fixture(scope="module")
def migrating_run() -> ProgramRun:
    return build_component(lambda: SqliteToPostgres("hydra-migration", ARGS))


def _job(run) -> dict:
    (job,) = [o for o in run.kubernetes_objects() if o["kind"] == "Job"]
    return job


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


def test_the_database_settings_follow_the_target() -> None:
    target = PostgresStorage(
        connection=PostgresConnection(host="pg", port=6432, name="vpn", user="vpn_app", ssl="verify-full"),
        password_secret="vpn-db",
        password_key="pass",
    )
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in api.env(database_env(target))}
    assert env["HEADSCALE_DATABASE_POSTGRES_PORT"] == "6432"
    assert env["HEADSCALE_DATABASE_POSTGRES_SSL"] == "verify-full"
    assert env["HEADSCALE_DATABASE_POSTGRES_PASS"] == {"secretKeyRef": {"name": "vpn-db", "key": "pass"}}


def test_an_unknown_tls_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"ssl 'verify': expected one of disable, .*verify-full"):
        PostgresConnection(host="pg", name="hs", user="hs", ssl="verify")
    assert PostgresConnection(host="pg", name="hs", user="hs").ssl == "verify-full", "verifying is the default"


def test_the_job_mounts_no_private_key_and_checks_what_the_pods_restore_checks(migrating_run) -> None:
    """The restore gets the backup key and the served witness's recorded position, with the age limit (the signature
    binds the replica to the tailnet, so no fingerprint is needed); configtest makes throwaway keys in its /tmp. No
    container mounts the identity Secret, and the pod has no volume of it."""
    pod = _job(migrating_run)["spec"]["template"]["spec"]
    restore, schema, _ = pod["initContainers"]
    identity = {"noise_private.key", "derp_server_private.key"}
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert "headscale-identity" not in secret_volumes.values()
    for container in [*pod["initContainers"], *pod["containers"]]:
        mounted = {m["name"] for m in container.get("volumeMounts", [])}
        assert mounted <= {v["name"] for v in pod["volumes"]}
        assert not any("identity" in name for name in mounted), container["name"]
        values = [e.get("value", "") for e in container.get("env", [])]
        assert not [v for v in values if v.rsplit("/", 1)[-1] in identity and not v.startswith("/tmp/")]
    schema_env = {e["name"]: e.get("value") for e in schema["env"]}
    assert schema_env["HEADSCALE_NOISE_PRIVATE_KEY_PATH"].startswith("/tmp/")
    assert schema_env["HEADSCALE_DERP_SERVER_PRIVATE_KEY_PATH"].startswith("/tmp/")
    assert {"name": "tmp", "mountPath": "/tmp"} in schema["volumeMounts"]
    env = {e["name"]: e.get("value") for e in restore["env"]}
    assert "IDENTITY_FILE" not in env
    assert env["MAX_REPLICA_AGE_SECONDS"] == str(24 * 3600)
    assert env["POSITION_WITNESS_FILE"] == "/etc/litestream-served/position"
    assert env["SERVED_FILE"] == "/etc/litestream-served/served", "a served site without a position is refused"
    (witness,) = [v for v in pod["volumes"] if v["name"] == "served-witness"]
    assert witness["configMap"] == {
        "name": "headscale-served",
        "optional": True,
        "defaultMode": 0o444,
        "items": [{"key": "served", "path": "served"}, {"key": "position", "path": "position"}],
    }
    assert {"name": "served-witness", "mountPath": "/etc/litestream-served", "readOnly": True} in restore[
        "volumeMounts"
    ]
