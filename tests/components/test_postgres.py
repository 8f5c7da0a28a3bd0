"""PostgresDatabase: a CNPG cluster archived to an object store (the postgres stage's database).

At the component seam: each test builds one PostgresDatabase from hand-written args. The stack-level checks (Headscale
without a volume on it, the rendered stage validated, the backup table, a standby site's replica cluster and owner
password as the stacks plan them, the Args the site maps its config to) are in tests/program/test_site_postgres.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headscale_ha.components.postgres import PostgresDatabase, PostgresDatabaseArgs, ReplicaOf
from headscale_ha.components.settings import ComputeResources, ObjectStore, ResourceAmounts
from tests.support.component_run import build_component
from tests.support.manifest_validator import validate
from tools.harness import SECRET, ProgramRun
from tools.plan import write_rendered


def _objects(run, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _lone_database(*, instances: int = 3, replica_of: ReplicaOf | None = None) -> ProgramRun:
    """PostgresDatabase alone, in the namespace `headscale` (no stack file): what program/args.py's
    postgres_database_args yields for the postgres stage's defaults, by hand."""
    args = PostgresDatabaseArgs(
        namespace="headscale",
        instances=instances,
        image="ghcr.io/cloudnative-pg/postgresql:15.18",
        resources=ComputeResources(
            requests=ResourceAmounts(cpu="100m", memory="256Mi"), limits=ResourceAmounts(cpu="1", memory="1Gi")
        ),
        storage_size="5Gi",
        object_store=ObjectStore(
            destination_path="s3://headscale-wal/hydra", endpoint_url="https://s3.internal.example.com"
        ),
        object_store_access_key_id="AKIA-example",
        object_store_secret_access_key="example-secret",
        backup_schedule="0 0 3 * * *",
        replica_of=replica_of,
    )
    return build_component(lambda: PostgresDatabase("hydra-db", args))


@pytest.fixture(scope="module")
def postgres_run() -> ProgramRun:
    return _lone_database()


def test_cnpg_cluster_archives_its_wal_through_the_plugin(postgres_run) -> None:
    (cluster,) = _objects(postgres_run, "Cluster")
    spec = cluster["spec"]
    assert spec["instances"] == 3
    assert spec["affinity"]["podAntiAffinityType"] == "required"
    assert spec["plugins"] == [
        {
            "name": "barman-cloud.cloudnative-pg.io",
            "isWALArchiver": True,
            "parameters": {"barmanObjectName": "headscale-db-store"},
        }
    ]
    (store,) = _objects(postgres_run, "ObjectStore")
    assert store["spec"]["configuration"]["destinationPath"] == "s3://headscale-wal/hydra"
    assert store["spec"]["configuration"]["s3Credentials"]["accessKeyId"] == {
        "name": "headscale-db-s3",
        "key": "ACCESS_KEY_ID",
    }
    (backup,) = _objects(postgres_run, "ScheduledBackup")
    assert backup["spec"]["method"] == "plugin"
    secret = next(o for o in _objects(postgres_run, "Secret") if o["metadata"]["name"] == "headscale-db-s3")
    assert secret["stringData"] == {"ACCESS_KEY_ID": SECRET, "ACCESS_SECRET_KEY": SECRET}


def test_the_server_certificate_names_the_read_write_host_and_the_cnpg_ca_signs_it(postgres_run) -> None:
    """verify-full needs the connected name in the certificate; the CA stays CNPG's own."""
    (cluster,) = _objects(postgres_run, "Cluster")
    certificates = cluster["spec"]["certificates"]
    # The host clients connect to is a name of the server certificate on every CNPG release.
    assert certificates == {"serverAltDNSNames": ["headscale-db-rw.headscale.svc.cluster.local"]}
    assert not any(k in cluster["spec"]["certificates"] for k in ("serverCASecret", "serverTLSSecret"))


def test_the_database_validates(postgres_run, shared_dir: Path, tmp_path: Path) -> None:
    files = [f for f in write_rendered(postgres_run, tmp_path) if f.suffix == ".yaml"]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout


def test_a_replica_cluster_archives_nothing() -> None:
    run = _lone_database(instances=1, replica_of=ReplicaOf())
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


@pytest.mark.parametrize("role", ["active", "standby"])
def test_the_owner_password_is_ours_and_cnpg_applies_it_on_the_primary(role: str) -> None:
    """A replica cluster gets no `-app` Secret from CNPG, and after a promotion that one would not match the role:
    the cluster bootstraps from its own owner Secret, which CNPG sets on the role wherever the primary is."""
    run = _lone_database(replica_of=None if role == "active" else ReplicaOf())
    (cluster,) = _objects(run, "Cluster")
    owner = next(o for o in _objects(run, "Secret") if o["metadata"]["name"] == "headscale-db-owner")
    assert owner["type"] == "kubernetes.io/basic-auth"
    assert owner["stringData"] == {"username": SECRET, "password": SECRET}  # the provider marks all Secret data
    bootstrap = cluster["spec"]["bootstrap"]["initdb" if role == "active" else "recovery"]
    assert bootstrap["secret"] == {"name": "headscale-db-owner"}
    assert cluster["spec"]["managed"]["roles"] == [
        {"name": "headscale", "ensure": "present", "login": True, "passwordSecret": {"name": "headscale-db-owner"}}
    ]
