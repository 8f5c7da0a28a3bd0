"""The stack config mapped to the Args of Headplane, PostgresDatabase and BackupVolume.

The decisions these components no longer take themselves are taken here, from the whole stack config: how many
replicas a role runs, whether a restore may start empty, which site a replica cluster follows, which key comes from
where. Secret values are handed over as they are: the components mark every one a Pulumi secret.
"""

from __future__ import annotations

import pulumi

from components.backup_volume import BackupVolumeArgs
from components.headplane import HeadplaneArgs
from components.postgres import PostgresDatabaseArgs, ReplicaOf
from components.settings import ReplicaSource, Role
from program.config import StackConfig


def headplane_replicas(config: StackConfig) -> int:
    """A standby keeps Headplane's objects and data but runs no pod."""
    return 0 if config.role is Role.STANDBY else 1


def headplane_args(
    config: StackConfig, *, headscale_url: str, api_key: pulumi.Output[str] | None = None
) -> HeadplaneArgs:
    """Headplane's Args; ``api_key`` is the key the provider minted, else the stack's `headplaneApiKey` is used."""
    key: pulumi.Input[str] | None = api_key
    if key is None and config.headplane_api_key is not None:
        key = config.headplane_api_key.get_secret_value()
    oidc_client_secret = None
    if config.headscale.oidc is not None and config.oidc_client_secret is not None:
        oidc_client_secret = config.oidc_client_secret.get_secret_value()
    return HeadplaneArgs(
        namespace=config.namespace,
        image=config.headplane.image,
        replicas=headplane_replicas(config),
        resources=config.headplane.resources,
        placement=config.cluster,
        storage_size=config.headplane.storage_size,
        storage_class=config.cluster.storage_class,
        public_hostname=config.tailnet.public_hostname,
        headscale_url=headscale_url,
        oidc=config.headscale.oidc,
        oidc_client_secret=oidc_client_secret,
        api_key=key,
        backup=config.backup,
        require_backup=config.role is Role.STANDBY,
    )


def postgres_database_args(config: StackConfig) -> PostgresDatabaseArgs:
    """The CNPG cluster's Args: a standby runs a replica cluster of the active site's, streaming when configured."""
    postgres = config.database.postgres
    store = postgres.object_store
    if store is None or config.object_store_access_key_id is None or config.object_store_secret_access_key is None:
        raise ValueError("database.postgres.objectStore and its credentials are required (checked by the config)")
    replica_of = None
    if config.role is Role.STANDBY:
        streaming = postgres.replica_source is ReplicaSource.STREAMING
        replica_of = ReplicaOf(streaming_host=str(postgres.streaming_host) if streaming else None)
    return PostgresDatabaseArgs(
        namespace=config.namespace,
        instances=postgres.instances,
        image=postgres.image,
        resources=postgres.resources,
        storage_size=postgres.storage_size,
        storage_class=config.cluster.storage_class,
        object_store=store,
        object_store_access_key_id=config.object_store_access_key_id.get_secret_value(),
        object_store_secret_access_key=config.object_store_secret_access_key.get_secret_value(),
        backup_schedule=postgres.backup_schedule,
        replica_of=replica_of,
    )


def backup_volume_args(config: StackConfig) -> BackupVolumeArgs:
    """The backup claim's Args; only a stack that names an NFS target (`backup.nfs`) has one."""
    if config.backup.nfs is None:
        raise ValueError("backup.nfs is required for the backup volume")
    return BackupVolumeArgs(namespace=config.namespace, nfs=config.backup.nfs)
