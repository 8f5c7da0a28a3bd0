"""The stack config mapped to the Args of HeadscaleServer and SqliteToPostgres.

The decisions these components no longer take themselves are taken here, from the whole stack config: how many
replicas the role and stage allow, where the identity comes from, which database the stage uses, whether a
restore may start empty, and which split-DNS zones the tailnet's sites answer.
"""

from __future__ import annotations

from components.backup_volume import claim_name
from components.headscale import (
    GeneratedIdentity,
    HeadscaleServerArgs,
    IdentityFromStack,
    IdentitySource,
    ImportedIdentity,
    PostgresStorage,
    SqliteStorage,
)
from components.headscale_config import PostgresConnection
from components.migration import SqliteToPostgresArgs
from components.postgres import DATABASE, OWNER, app_secret, read_write_host
from components.settings import DatabaseStage, Role
from program.config import StackConfig


def headscale_replicas(config: StackConfig) -> int:
    """0 on a standby and while migrating (registrations pause, tunnels keep running); else the configured 0 or 1."""
    if config.role is Role.STANDBY or config.database.stage is DatabaseStage.MIGRATING:
        return 0
    return config.headscale.replicas


def identity_source(config: StackConfig) -> IdentitySource:
    """A standby reads the active stack's `identity` output unless its Noise key is imported; imported keys win
    (a key not imported is generated); with neither, both keys are generated."""
    if config.identity_from is not None and config.noise_private_key is None:
        return IdentityFromStack(stack_name=config.identity_from)
    if config.noise_private_key is None and config.derp_private_key is None:
        return GeneratedIdentity()
    # Plain strings: the component makes them Pulumi secrets before anything uses them.
    return ImportedIdentity(noise_private_key=config.noise_private_key, derp_private_key=config.derp_private_key)


def postgres_storage(config: StackConfig) -> PostgresStorage:
    """The CNPG cluster's read-write Service, the application database and the owner's password Secret."""
    return PostgresStorage(
        connection=PostgresConnection(host=read_write_host(config.namespace), name=DATABASE, user=OWNER),
        password_secret=app_secret(),
    )


def headscale_storage(config: StackConfig) -> SqliteStorage | PostgresStorage:
    """SQLite (backed up, restored before serving) until the postgres stage; the migrating stage keeps SQLite as the
    rollback point. A standby's restore must find a backup, never start empty."""
    if config.database.stage is DatabaseStage.POSTGRES:
        return postgres_storage(config)
    return SqliteStorage(
        size=config.headscale.storage_size,
        storage_class=config.cluster.storage_class,
        backup=config.backup,
        require_backup=config.role is Role.STANDBY,
    )


def split_dns(config: StackConfig) -> dict[str, tuple[str, ...]]:
    """Every site's split-DNS zone, answered by that site's gateway IP."""
    tailnet = config.tailnet
    return {tailnet.zone_of(site): (site.gateway_ip,) for site in tailnet.sites}


def headscale_server_args(config: StackConfig) -> HeadscaleServerArgs:
    """HeadscaleServer's Args for this stack's role and database stage."""
    headscale, tailnet = config.headscale, config.tailnet
    oidc_client_secret = None  # made a Pulumi secret by the component, like the imported keys
    if headscale.oidc is not None and config.oidc_client_secret is not None:
        oidc_client_secret = config.oidc_client_secret.get_secret_value()
    public_address = config.site.public_address
    return HeadscaleServerArgs(
        namespace=config.namespace,
        image=headscale.image,
        version=headscale.version,
        replicas=headscale_replicas(config),
        resources=headscale.resources,
        cluster=config.cluster,
        identity=identity_source(config),
        database=headscale_storage(config),
        server_hostname=tailnet.public_hostname,
        prefixes=tailnet.prefixes,
        ephemeral_inactivity_timeout=headscale.ephemeral_inactivity_timeout,
        log_level=headscale.log_level,
        derp=headscale.derp,
        stun_address=str(public_address) if public_address is not None else None,
        oidc=headscale.oidc,
        oidc_client_secret=oidc_client_secret,
        base_domain=tailnet.base_domain,
        nameservers=tuple(tailnet.nameservers),
        split_dns=split_dns(config),
    )


def sqlite_to_postgres_args(config: StackConfig) -> SqliteToPostgresArgs:
    """The migration Job's Args: this stack's SQLite backup into its CNPG cluster."""
    migration, backup = config.database.migration, config.backup
    if migration.image is None or backup.nfs is None:
        raise ValueError("database.migration.image and backup.nfs are required (checked by the config)")
    return SqliteToPostgresArgs(
        namespace=config.namespace,
        image=migration.image,
        force=migration.force,
        deadline_seconds=migration.deadline_seconds,
        headscale_image=config.headscale.image,
        headscale_version=config.headscale.version,
        resources=config.headscale.resources,
        restore_image=backup.litestream.image,
        restore_resources=backup.litestream.resources,
        backup_claim=claim_name(backup.nfs),
        target=postgres_storage(config),
        oidc=config.headscale.oidc is not None,
        cluster=config.cluster,
    )
