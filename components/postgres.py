"""PostgresDatabase: the CloudNativePG cluster Headscale moves to, archived continuously to an object store.

WAL archiving goes through the barman-cloud plugin (an `ObjectStore` plus the cluster's `plugins` entry) and a
`ScheduledBackup` takes base backups; together they are this stage's backup. The owner's password is a Secret of
this component (see OWNER_SECRET), which CNPG applies to the role on the primary.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.pod import labels, resources
from components.settings import ReplicaSource, Role
from program.config import StackConfig

CLUSTER = "headscale-db"
DATABASE = "headscale"
OWNER = "headscale"
STORE = f"{CLUSTER}-store"
CREDENTIALS = f"{CLUSTER}-s3"
BARMAN_PLUGIN = "barman-cloud.cloudnative-pg.io"
#: The active site's cluster as a standby's replica cluster knows it: through the shared WAL archive.
ACTIVE_SOURCE = "active-db"
#: The active cluster's `<cluster>-replication` and `<cluster>-ca`, copied to the standby under these names: its own
#: cluster has the same name, and CNPG generates Secrets with the original names for it.
ACTIVE_REPLICATION_SECRET = f"{ACTIVE_SOURCE}-replication"
ACTIVE_CA_SECRET = f"{ACTIVE_SOURCE}-ca"


#: The owner's credentials, ours rather than CNPG's `<cluster>-app`: CNPG creates no `-app` Secret for a replica
#: cluster, and after a promotion it would not hold the password the role was replicated with. CNPG sets the role's
#: password from this Secret (bootstrap and managed role) on whichever cluster is primary, so each site's Headscale
#: reads a password its own database accepts.
OWNER_SECRET = f"{CLUSTER}-owner"


def app_secret() -> str:
    """The Secret Headscale and the migration Job read the owner's password from."""
    return OWNER_SECRET


def read_write_host(namespace: str) -> str:
    return f"{CLUSTER}-rw.{namespace}.svc.cluster.local"


@dataclass(frozen=True, kw_only=True)
class PostgresDatabaseArgs:
    config: StackConfig
    namespace: str


class PostgresDatabase(pulumi.ComponentResource):
    """CNPG Cluster, its object store and its scheduled backups."""

    cluster: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: PostgresDatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:postgres:PostgresDatabase", name, None, opts)
        config, namespace = args.config, args.namespace
        postgres = config.database.postgres
        store = postgres.object_store
        if store is None or config.object_store_access_key_id is None or config.object_store_secret_access_key is None:
            raise ValueError("database.postgres.objectStore and its credentials are required (checked by the config)")
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(CLUSTER, "database")}
        password = random.RandomPassword(f"{name}-owner-password", length=32, special=False, opts=child)
        owner = k8s.core.v1.Secret(
            f"{name}-owner",
            # CNPG reloads a labelled Secret at once: a new password reaches the role without waiting.
            metadata={**meta, "name": OWNER_SECRET, "labels": {**meta["labels"], "cnpg.io/reload": "true"}},
            type="kubernetes.io/basic-auth",
            string_data={"username": OWNER, "password": pulumi.Output.secret(password.result)},
            opts=child,
        )
        credentials = k8s.core.v1.Secret(
            f"{name}-s3",
            metadata={**meta, "name": CREDENTIALS},
            type="Opaque",
            string_data={
                "ACCESS_KEY_ID": pulumi.Output.secret(config.object_store_access_key_id.get_secret_value()),
                "ACCESS_SECRET_KEY": pulumi.Output.secret(config.object_store_secret_access_key.get_secret_value()),
            },
            opts=child,
        )
        configuration: dict[str, object] = {
            "destinationPath": store.destination_path,
            "s3Credentials": {
                "accessKeyId": {"name": CREDENTIALS, "key": "ACCESS_KEY_ID"},
                "secretAccessKey": {"name": CREDENTIALS, "key": "ACCESS_SECRET_KEY"},
            },
            "wal": {"compression": "gzip"},
            "data": {"compression": "gzip"},
        }
        if store.endpoint_url:
            configuration["endpointURL"] = store.endpoint_url
        object_store = k8s.apiextensions.CustomResource(
            f"{name}-store",
            api_version="barmancloud.cnpg.io/v1",
            kind="ObjectStore",
            metadata={**meta, "name": STORE},
            spec={"configuration": configuration, "retentionPolicy": store.retention},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[credentials]),
        )
        storage: dict[str, object] = {"size": postgres.storage_size}
        if config.cluster.storage_class:
            storage["storageClass"] = config.cluster.storage_class
        spec: dict[str, object] = {
            "instances": postgres.instances,
            "imageName": postgres.image,
            "storage": storage,
            "resources": resources(postgres.resources),
            "enableSuperuserAccess": False,
            "affinity": {
                "enablePodAntiAffinity": True,
                "topologyKey": "kubernetes.io/hostname",
                # Required when there is more than one instance: two instances on one node share its fate.
                "podAntiAffinityType": "required" if postgres.instances > 1 else "preferred",
            },
        }
        # The role's password follows the owner Secret on the primary, including right after a promotion.
        spec["managed"] = {
            "roles": [{"name": OWNER, "ensure": "present", "login": True, "passwordSecret": {"name": OWNER_SECRET}}]
        }
        standby = config.role is Role.STANDBY
        if standby:
            # A replica cluster: recovered from the active site's archive and following it; it archives nothing
            # (one writer per archive). Promotion = role active: `replica.enabled` false, then the plugin archives.
            source: dict[str, object] = {
                "name": ACTIVE_SOURCE,
                "plugin": {"name": BARMAN_PLUGIN, "parameters": {"barmanObjectName": STORE, "serverName": CLUSTER}},
            }
            if postgres.replica_source is ReplicaSource.STREAMING:
                # Streaming first, the archive as fallback; the active's replication certificates are copied here
                # under names of their own.
                source["connectionParameters"] = {
                    "host": str(postgres.streaming_host),
                    "user": "streaming_replica",
                    "dbname": "postgres",
                    "sslmode": "verify-full",
                }
                source["sslKey"] = {"name": ACTIVE_REPLICATION_SECRET, "key": "tls.key"}
                source["sslCert"] = {"name": ACTIVE_REPLICATION_SECRET, "key": "tls.crt"}
                source["sslRootCert"] = {"name": ACTIVE_CA_SECRET, "key": "ca.crt"}
            spec["bootstrap"] = {
                "recovery": {
                    "source": ACTIVE_SOURCE,
                    "database": DATABASE,
                    "owner": OWNER,
                    "secret": {"name": OWNER_SECRET},
                }
            }
            spec["replica"] = {"enabled": True, "source": ACTIVE_SOURCE}
            spec["externalClusters"] = [source]
        else:
            spec["bootstrap"] = {"initdb": {"database": DATABASE, "owner": OWNER, "secret": {"name": OWNER_SECRET}}}
            spec["plugins"] = [
                {"name": BARMAN_PLUGIN, "isWALArchiver": True, "parameters": {"barmanObjectName": STORE}}
            ]
        self.cluster = k8s.apiextensions.CustomResource(
            f"{name}-cluster",
            api_version="postgresql.cnpg.io/v1",
            kind="Cluster",
            metadata={**meta, "name": CLUSTER},
            spec=spec,
            # Bootstrap only matters when the cluster is created; a promoted replica keeps its data.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[object_store, owner], retain_on_delete=True, ignore_changes=["spec.bootstrap"]
            ),
        )
        if standby:
            self.register_outputs({"cluster": CLUSTER, "replicaOf": ACTIVE_SOURCE})
            return
        k8s.apiextensions.CustomResource(
            f"{name}-scheduled-backup",
            api_version="postgresql.cnpg.io/v1",
            kind="ScheduledBackup",
            metadata={**meta, "name": f"{CLUSTER}-daily"},
            spec={
                "schedule": postgres.backup_schedule,
                "cluster": {"name": CLUSTER},
                "method": "plugin",
                "pluginConfiguration": {"name": BARMAN_PLUGIN},
                "backupOwnerReference": "self",
                "immediate": True,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]),
        )
        self.register_outputs({"cluster": CLUSTER, "host": read_write_host(namespace)})
