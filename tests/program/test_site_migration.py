"""The stack-level checks of SqliteToPostgres: the migrating stage as a stack plans it (Headscale stopped beside the
Job, its SQLite backup kept), the ConfigError of a missing `database.migration.image`, and the Job's args as a
stack's config yields them. The component's own behaviour is tested at its seam, in
tests/components/test_sqlite_to_postgres.py."""

from __future__ import annotations

import pytest

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.settings import Nfs
from headscale_ha.program.config import ConfigError
from headscale_ha.program.database_stage import Migrating
from headscale_ha.program.site_args import site_args
from tests.support.config_samples import STORE, STORE_KEYS, parse
from tests.support.stack_snippets import POSTGRES

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


def test_headscale_is_stopped_and_its_sqlite_kept(migrating_run) -> None:
    objects = migrating_run.kubernetes_objects()
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "headscale")
    assert deployment["spec"]["replicas"] == 0
    # The rollback point is the Litestream replica, which the Job only reads (disposable storage keeps no claim).
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    assert claims == {BACKUP_CLAIM}
    assert [o["kind"] for o in objects].count("Cluster") == 1


def test_the_migrating_stage_needs_a_migration_image(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"database\.migration\.image: is required in the migrating stage"):
        run_stack("lab", project_dir=lab_project(POSTGRES.replace("stage: postgres", "stage: migrating")))


def test_the_args_point_the_job_at_this_stacks_backup_and_cnpg_cluster() -> None:
    database = {"stage": "migrating", "postgres": {"objectStore": STORE}, "migration": {"image": MIGRATION_IMAGE}}
    config = parse("hydra", secret_keys=tuple(STORE_KEYS), database=database, **STORE_KEYS)
    database_args = site_args(config).database
    assert isinstance(database_args, Migrating)
    args = database_args.migration
    assert (args.image, args.force, args.deadline_seconds) == (MIGRATION_IMAGE, False, 3600)
    assert args.backup_claim == BACKUP_CLAIM
    assert args.target.connection.host == "headscale-db-rw.headscale.svc.cluster.local"
    assert args.target.password_secret == "headscale-db-owner"
    assert (args.headscale_version, args.oidc) == ("0.29.2", False)
    without_image = config.database.model_copy(
        update={"migration": config.database.migration.model_copy(update={"image": None})}
    )
    with pytest.raises(ConfigError, match=r"database\.migration\.image: is required in the migrating stage"):
        site_args(config.model_copy(update={"database": without_image}))
