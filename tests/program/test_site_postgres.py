"""The stack-level checks of PostgresDatabase: the postgres stage as a stack plans it (Headscale without a volume,
reading the CNPG Secret and CA; Headplane's SQLite kept; the rendered stage validated; the backup table), a standby
site's replica cluster and owner password, and the Args the site maps its config to. The component's own behaviour
is tested at its seam, in tests/components/test_postgres.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.postgres import PostgresDatabaseArgs, ReplicaOf
from headscale_ha.components.settings import Nfs, ReplicaSource, Role
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.database_stage import OnPostgres
from headscale_ha.program.site_args import site_args
from tests.support.headscale_config_samples import stack_config
from tests.support.manifest_validator import validate
from tests.support.stack_snippets import POSTGRES
from tests.support.stacks import ACTIVE_STACK, LAB_STACK
from tools.harness import SECRET
from tools.plan import write_rendered

#: The backup claim of the shared config's NFS source (Pulumi.yaml).
BACKUP_CLAIM = claim_name(Nfs(server="nfs.internal.example.com", path="/export/headscale-backup"))


def _objects(run, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


@pytest.fixture
def postgres_run(run_stack, lab_project):
    return run_stack("lab", project_dir=lab_project(POSTGRES))


def test_headscale_on_postgres_has_no_volume_and_reads_the_cnpg_secret(postgres_run) -> None:
    deployment = next(o for o in _objects(postgres_run, "Deployment") if o["metadata"]["name"] == "headscale")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    assert pod["initContainers"] == []
    (container,) = pod["containers"]
    assert container["env"] == [
        {
            "name": "HEADSCALE_DATABASE_POSTGRES_PASS",
            "valueFrom": {"secretKeyRef": {"name": "headscale-db-owner", "key": "password"}},
        },
        {"name": "PGSSLROOTCERT", "value": "/etc/headscale/postgres-ca/ca.crt"},
    ]
    config_map = next(o for o in _objects(postgres_run, "ConfigMap") if o["metadata"]["name"] == "headscale-config")
    database = yaml.safe_load(config_map["data"]["config.yaml"])["database"]
    assert database["type"] == "postgres"
    assert database["postgres"]["host"] == "headscale-db-rw.headscale.svc.cluster.local"
    assert database["postgres"]["ssl"] == "verify-full"
    claims = {o["metadata"]["name"] for o in _objects(postgres_run, "PersistentVolumeClaim")}
    assert claims == {BACKUP_CLAIM}, "Headplane keeps its own (disposable) SQLite and its backup"
    headplane = next(o for o in _objects(postgres_run, "Deployment") if o["metadata"]["name"] == "headplane")
    assert {"name": "data", "emptyDir": {"sizeLimit": "256Mi"}} in headplane["spec"]["template"]["spec"]["volumes"]


def test_headscale_verifies_the_server_against_the_cnpg_ca_alone(postgres_run) -> None:
    """verify-full needs the CA file (pgx reads PGSSLROOTCERT) and the connected name in the certificate."""
    deployment = next(o for o in _objects(postgres_run, "Deployment") if o["metadata"]["name"] == "headscale")
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "postgres-ca"]
    assert volume["secret"] == {
        "secretName": "headscale-db-ca",
        "defaultMode": 0o444,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],  # never ca.key, which sits in the same Secret
    }
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "postgres-ca"]
    assert mount == {"name": "postgres-ca", "mountPath": "/etc/headscale/postgres-ca", "readOnly": True}
    (cluster,) = _objects(postgres_run, "Cluster")
    certificates = cluster["spec"]["certificates"]
    # The host clients connect to is a name of the server certificate on every CNPG release.
    assert certificates == {"serverAltDNSNames": ["headscale-db-rw.headscale.svc.cluster.local"]}
    assert not any(k in cluster["spec"]["certificates"] for k in ("serverCASecret", "serverTLSSecret"))


def test_the_postgres_stage_validates(postgres_run, shared_dir: Path, tmp_path: Path) -> None:
    files = [f for f in write_rendered(postgres_run, tmp_path) if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout


def test_backup_table_follows_the_stage(postgres_run) -> None:
    names = {row["name"] for row in postgres_run.outputs["mustBackUp"]}
    assert "headscale/headscale-db" in names
    assert not [name for name in names if name.startswith("headscale/headscale ") or name.endswith("headscale-data")]


def test_a_standby_on_postgres_runs_a_replica_cluster_that_archives_nothing(
    run_stack, project_copy, stack_outputs
) -> None:
    project = project_copy()
    stack_file = project / "Pulumi.cosmos.yaml"
    sqlite = "  headscale-ha:database:\n    stage: sqlite\n    postgres:\n      instances: 1\n"
    assert sqlite in stack_file.read_text()
    stack_file.write_text(stack_file.read_text().replace(sqlite, POSTGRES.replace("instances: 3", "instances: 1")))
    stack_outputs[ACTIVE_STACK]["databaseStage"] = "postgres"  # the active it follows runs PostgreSQL too
    run = run_stack("cosmos", project_dir=project, stack_outputs=stack_outputs)
    (cluster,) = _objects(run, "Cluster")
    spec = cluster["spec"]
    assert spec["replica"] == {"enabled": True, "source": "active-db"}
    assert spec["bootstrap"]["recovery"]["source"] == "active-db"
    assert spec["externalClusters"][0]["plugin"]["parameters"] == {
        "barmanObjectName": "headscale-db-store",
        "serverName": "headscale-db",
    }
    assert "plugins" not in spec, "one writer per archive: the replica does not archive"
    assert _objects(run, "ScheduledBackup") == []
    deployment = next(o for o in _objects(run, "Deployment") if o["metadata"]["name"] == "headscale")
    assert deployment["spec"]["replicas"] == 0


@pytest.mark.parametrize("role", ["active", "standby"])
def test_the_owner_password_is_ours_and_cnpg_applies_it_on_the_primary(
    role: str, run_stack, project_copy, stack_outputs
) -> None:
    """A replica cluster gets no `-app` Secret from CNPG, and after a promotion that one would not match the role:
    both sites read their own owner Secret, which CNPG sets on the role wherever the primary is."""
    if role == "active":
        run = run_stack("lab", project_dir=project_copy(lab=LAB_STACK + POSTGRES))
    else:
        stack = (
            "config:\n  headscale-ha:role: standby\n"
            "  headscale-ha:cluster: {name: cosmos, nodes: 3, apiServer: {host: 10.2.0.1}}\n"
            "  headscale-ha:networkPolicy: {apiServerCidrs: [10.2.0.0/24]}\n"
        )
        stack_outputs[ACTIVE_STACK]["databaseStage"] = "postgres"  # the active it follows runs PostgreSQL too
        run = run_stack("lab", project_dir=project_copy(lab=stack + POSTGRES), stack_outputs=stack_outputs)
    (cluster,) = _objects(run, "Cluster")
    owner = next(o for o in _objects(run, "Secret") if o["metadata"]["name"] == "headscale-db-owner")
    assert owner["type"] == "kubernetes.io/basic-auth"
    assert owner["stringData"] == {"username": SECRET, "password": SECRET}  # the provider marks all Secret data
    bootstrap = cluster["spec"]["bootstrap"]["initdb" if role == "active" else "recovery"]
    assert bootstrap["secret"] == {"name": "headscale-db-owner"}
    assert cluster["spec"]["managed"]["roles"] == [
        {"name": "headscale", "ensure": "present", "login": True, "passwordSecret": {"name": "headscale-db-owner"}}
    ]
    (headscale,) = [o for o in _objects(run, "Deployment") if o["metadata"]["name"] == "headscale"]
    env, ca = headscale["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "headscale-db-owner", "key": "password"}
    assert ca == {"name": "PGSSLROOTCERT", "value": "/etc/headscale/postgres-ca/ca.crt"}, "the site's own CA"


# ------------------------------------------------------------------------------------------ the site's mapping


def _on_postgres(role: Role, **postgres: Any) -> StackConfig:
    config = stack_config(stage="postgres")
    settings = config.database.postgres.model_copy(update=postgres)
    return config.model_copy(
        update={"role": role, "database": config.database.model_copy(update={"postgres": settings})}
    )


def _cluster_args(config: StackConfig) -> PostgresDatabaseArgs:
    database = site_args(config).database
    assert isinstance(database, OnPostgres)
    return database.cluster


def test_the_site_decides_the_replica_and_the_component_only_follows_it() -> None:
    assert _cluster_args(_on_postgres(Role.ACTIVE)).replica_of is None
    archive = _cluster_args(_on_postgres(Role.STANDBY, streaming_host="db.hydra.example.com"))
    assert archive.replica_of == ReplicaOf(streaming_host=None), "a host without `streaming` is not used"
    streaming = _on_postgres(Role.STANDBY, replica_source=ReplicaSource.STREAMING, streaming_host="db.example.com")
    assert _cluster_args(streaming).replica_of == ReplicaOf(streaming_host="db.example.com")


def test_args_hold_the_postgres_section_and_the_cluster_storage_class() -> None:
    config = _on_postgres(Role.ACTIVE, instances=3)
    args = _cluster_args(config)
    assert (args.instances, args.image, args.storage_size) == (3, config.database.postgres.image, "5Gi")
    assert args.storage_class == config.cluster.storage_class
    assert args.object_store == config.database.postgres.object_store
    assert args.backup_schedule == config.database.postgres.backup_schedule


def test_args_refuse_a_config_without_object_store_credentials() -> None:
    """The stage's rule (program/database_stage.py) is the config's: no args of the stage without its credentials."""
    config = _on_postgres(Role.ACTIVE).model_copy(update={"object_store_access_key_id": None})
    with pytest.raises(ConfigError, match=r"objectStoreAccessKeyId: is required in the postgres stage"):
        site_args(config)
