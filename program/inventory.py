"""What this stack keeps that matters, what losing it means, and how it is (or must be) backed up.

Published as the `mustBackUp` stack output, so the runbook is generated from the same config as the stack.
"""

from __future__ import annotations

from typing import Any

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.headplane import HEADPLANE_SECRET
from headscale_ha.components.headscale import IDENTITY_SECRET
from headscale_ha.components.settings import DatabaseStage, LocalStorage, ObjectStore
from headscale_ha.program.config import StackConfig


def _item(name: str, kind: str, owner: str, loss: str, required: bool, how: str) -> dict[str, Any]:
    return {"name": name, "kind": kind, "owner": owner, "lossMeans": loss, "backupRequired": required, "how": how}


def _local_volume(config: StackConfig, *, app: str, holds: str, backed_up_by: str) -> dict[str, Any]:
    """The application's local copy: a claim worth keeping on persistent storage, a scratch copy on disposable."""
    if config.backup.local.storage is LocalStorage.PERSISTENT:
        return _item(f"{config.namespace}/{app}-data", "PersistentVolumeClaim", app, holds, True, backed_up_by)
    kind = (
        f"generic ephemeral volume ({config.backup.local.ephemeral_storage_class})"
        if config.backup.local.ephemeral_storage_class
        else "emptyDir"
    )
    return _item(
        f"{config.namespace}/{app} pod volume `data`",
        f"{kind}, disposable",
        app,
        f"Nothing the replica does not hold, except the unreplicated tail on a node loss. {holds}",
        False,
        f"recreated with every pod and filled by the restore init container from the {backed_up_by.split(' (')[0]}",
    )


def _replica_root(config: StackConfig) -> str:
    """Where the Litestream replicas live, as an operator finds it."""
    nfs = config.backup.nfs
    if nfs is None:
        return "(no NFS target configured)"
    if nfs.storage_class is not None:
        return f"the claim {config.namespace}/{claim_name(nfs)} (StorageClass {nfs.storage_class})"
    return f"nfs://{nfs.server}{nfs.path}"


def _identity_and_state(config: StackConfig) -> list[dict[str, Any]]:
    """The tailnet's keys and the stack's own state: every stack has both."""
    identity = (
        "imported from the stack's secret config (noisePrivateKey/derpPrivateKey): back up the stack file and its "
        "secrets provider"
        if config.noise_private_key is not None
        else f"read from the identity stack {config.tailnet.identity_stack} (its `identity` output): the keys "
        "exist only in that stack's state, so back up its state backend and its secrets provider"
    )
    return [
        _item(
            f"{config.namespace}/{IDENTITY_SECRET}",
            "Secret",
            "headscale",
            "Noise and DERP private keys: a control plane with other keys is a different server to every client; "
            "a restored database is useless without them and every node must re-register.",
            True,
            identity,
        ),
        _item(
            "pulumi-state",
            "Pulumi stack state",
            "operator",
            "What pulumi-random generated for this stack (the Headplane cookie secret, the database owner's "
            "password) and the ids of the Headscale objects it manages; the identity keys are the identity "
            "stack's, not this one's.",
            True,
            "back up the state backend (pulumi login URL) and the passphrase or KMS key that encrypts its secrets",
        ),
    ]


def _sqlite_registry(config: StackConfig, replica_root: str, volsync: str) -> list[dict[str, Any]]:
    """Headscale's SQLite database: its local copy and its replica (the sqlite and migrating stages)."""
    return [
        _local_volume(
            config,
            app="headscale",
            holds="The node registry (users, nodes, keys, routes, policy): without a backup every node re-registers.",
            backed_up_by=f"continuous Litestream replica at {replica_root}/headscale (RPO about "
            f"{config.backup.litestream.sync_interval} + 1s){volsync}; restored by the restore init container",
        ),
        _item(
            f"{replica_root}/headscale",
            "Litestream replica directory",
            "headscale",
            "The only copy of the registry besides the live volume; with its identity.sha256 it proves which "
            "identity the data belongs to.",
            True,
            "snapshot or copy the NFS export off-site; never restore it with a different identity Secret",
        ),
    ]


def _postgres_registry(config: StackConfig, replica_root: str, store: ObjectStore) -> list[dict[str, Any]]:
    """The CloudNativePG cluster, its archive's credentials, and SQLite's replica kept as the rollback point."""
    return [
        _item(
            f"{config.namespace}/headscale-db",
            "CloudNativePG Cluster",
            "headscale",
            "The node registry. Instances replicate each other; losing all of them needs a restore from the "
            "object store (point in time).",
            True,
            f"continuous WAL archive and daily base backups to {store.destination_path} (barman-cloud plugin)",
        ),
        _item(
            "objectStoreAccessKeyId, objectStoreSecretAccessKey",
            "stack secret config",
            "headscale",
            "Without them no archive is written and no restore is possible.",
            True,
            "kept encrypted in the stack file: back up the stack file and its secrets provider",
        ),
        _item(
            f"{replica_root}/headscale",
            "Litestream replica directory (read-only)",
            "headscale",
            "The SQLite rollback point of the migration; nothing writes it any more.",
            False,
            "keep it until the PostgreSQL stage has proven itself, then archive it",
        ),
    ]


def _headplane(config: StackConfig, replica_root: str, volsync: str) -> list[dict[str, Any]]:
    """Headplane's own database (its local copy and its replica) and its Secret."""
    credentials = (
        "; the Headscale API key and OIDC client secret come from stack config" if config.headscale.oidc else ""
    )
    return [
        _local_volume(
            config,
            app="headplane",
            holds="Headplane's own users, roles and OIDC links (not Headscale's data).",
            backed_up_by=f"continuous Litestream replica at {replica_root}/headplane{volsync}",
        ),
        _item(
            f"{replica_root}/headplane",
            "Litestream replica directory",
            "headplane",
            "Restoring the control plane needs both applications' directories.",
            True,
            "snapshot or copy the NFS export off-site together with the headscale directory",
        ),
        _item(
            f"{config.namespace}/{HEADPLANE_SECRET}",
            "Secret",
            "headplane",
            f"Cookie secret: losing it logs every UI session out, nothing else{credentials}.",
            False,
            "regenerated by pulumi-random when lost; credentials from config are restored with the stack file",
        ),
    ]


def _router_state(config: StackConfig) -> dict[str, Any]:
    routers = config.gateway.routers.replicas
    return _item(
        f"{config.gateway.namespace}/subnet-router-[0-{routers - 1}]",
        "Secret",
        "subnet routers",
        "Each router's tailnet node identity. Without it the router must register again, and its single-use "
        "key is spent: it stays offline until the next `pulumi up` mints a new key (with API access) or a new "
        "one is set in routerAuthKeys; the old node entry lingers until removed.",
        False,
        "recreated by the routers; nothing to back up",
    )


def must_back_up(config: StackConfig) -> list[dict[str, Any]]:
    """The state/backup/loss table of this stack, one row per stateful object."""
    replica_root = _replica_root(config)
    volsync = " plus VolSync restic snapshots of the volume" if config.backup.volsync else ""
    rows = _identity_and_state(config)
    if config.database.stage in (DatabaseStage.SQLITE, DatabaseStage.MIGRATING):
        rows += _sqlite_registry(config, replica_root, volsync)
    store = config.database.postgres.object_store
    if config.database.stage is DatabaseStage.POSTGRES and store is not None:
        rows += _postgres_registry(config, replica_root, store)
    if config.headplane.enabled:
        rows += _headplane(config, replica_root, volsync)
    rows.append(_router_state(config))
    if config.headscale.oidc is not None:
        rows.append(
            _item(
                "oidcClientSecret",
                "stack secret config",
                "headscale",
                "OIDC logins fail until a new client secret is issued by the identity provider.",
                True,
                "kept encrypted in the stack file: back up the stack file and its secrets provider",
            )
        )
    return rows
