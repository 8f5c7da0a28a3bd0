"""PostgresDatabase: the CloudNativePG cluster Headscale moves to, archived continuously to an object store.

WAL archiving goes through the barman-cloud plugin (an `ObjectStore` plus the cluster's `plugins` entry) and a
`ScheduledBackup` takes base backups; together they are this stage's backup. The owner's password is a Secret of
this component (see OWNER_SECRET), which CNPG applies to the role on the primary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from headscale_ha.components.pod import Meta, kept, labels, resources
from headscale_ha.components.settings import ComputeResources, ObjectStore

DATABASE_CLUSTER = "headscale-db"
DATABASE = "headscale"
OWNER = "headscale"
STORE = f"{DATABASE_CLUSTER}-store"
CREDENTIALS = f"{DATABASE_CLUSTER}-s3"
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
OWNER_SECRET = f"{DATABASE_CLUSTER}-owner"


def app_secret() -> str:
    """The Secret Headscale and the migration Job read the owner's password from."""
    return OWNER_SECRET


def ca_secret() -> str:
    """The Secret CloudNativePG generates with the CA of the cluster's server certificate (`ca.crt`, and the CA's
    `ca.key`, which no client mounts): what clients verify the server against."""
    return f"{DATABASE_CLUSTER}-ca"


def read_write_host(namespace: str) -> str:
    """The read-write Service's name as clients use it, and as the server certificate names it (see
    `serverAltDNSNames`: CloudNativePG releases before the cluster-domain names only list `<svc>.<ns>.svc`)."""
    return f"{DATABASE_CLUSTER}-rw.{namespace}.svc.cluster.local"


#: The Cluster is awaited until its Ready condition (bootstrapping instances takes minutes: 20 at most).
READY_AWAIT = {"pulumi.com/waitFor": "condition=Ready", "pulumi.com/timeoutSeconds": "1200"}


@dataclass(frozen=True, kw_only=True)
class ReplicaOf:
    """A standby's replica cluster: it follows the active site's cluster through the shared WAL archive."""

    #: The active cluster's replication endpoint; None: the archive only. With a host the replica streams first and
    #: falls back to the archive; the active's `<cluster>-replication` and `<cluster>-ca` Secrets must then be copied
    #: into the namespace as ACTIVE_REPLICATION_SECRET and ACTIVE_CA_SECRET.
    streaming_host: str | None = None


@dataclass(frozen=True, kw_only=True)
class PostgresDatabaseArgs:
    """The CNPG cluster's shape, its storage, its object store, and whether it is a replica of another site's."""

    namespace: str  # namespace of the Cluster, its Secrets, its ObjectStore and its ScheduledBackup
    instances: int  # CNPG instances (one primary, the rest replicas); more than one: one per node, required
    image: str  # PostgreSQL operand image (CNPG's imageName)
    resources: ComputeResources  # requests and limits of each instance
    storage_size: str  # volume size per instance
    storage_class: str | None = None  # StorageClass of those volumes; None: the cluster's default
    object_store: ObjectStore  # barman-cloud destination (s3://), endpoint and retention of the archive
    object_store_access_key_id: pulumi.Input[str]  # S3 access key id; kept a Pulumi secret
    object_store_secret_access_key: pulumi.Input[str]  # S3 secret access key; kept a Pulumi secret
    backup_schedule: str  # base backup cron, six fields (seconds first); a replica takes none
    replica_of: ReplicaOf | None = None  # None: the primary, which archives; set: a standby's replica cluster


def object_store_spec(store: ObjectStore) -> dict[str, Any]:
    """The barman-cloud ObjectStore's spec: where the archive goes, with which credentials, kept how long."""
    configuration: dict[str, Any] = {
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
    return {"configuration": configuration, "retentionPolicy": store.retention}


def cluster_spec(args: PostgresDatabaseArgs) -> dict[str, Any]:
    """The CNPG Cluster's spec: its shape and storage, the owner's managed role, and how it starts (initdb and
    archiving on a primary; recovery from the active site's archive on a replica cluster)."""
    storage: dict[str, Any] = {"size": args.storage_size}
    if args.storage_class:
        storage["storageClass"] = args.storage_class
    spec: dict[str, Any] = {
        "instances": args.instances,
        "imageName": args.image,
        "storage": storage,
        "resources": resources(args.resources),
        "enableSuperuserAccess": False,
        # The name clients connect to must be in the server certificate for verify-full; CNPG adds these to
        # the `-rw`/`-r`/`-ro` names it always lists (operator-generated certificates stay in place).
        "certificates": {"serverAltDNSNames": [read_write_host(args.namespace)]},
        "affinity": {
            "enablePodAntiAffinity": True,
            "topologyKey": "kubernetes.io/hostname",
            # Required when there is more than one instance: two instances on one node share its fate.
            "podAntiAffinityType": "required" if args.instances > 1 else "preferred",
        },
    }
    # The role's password follows the owner Secret on the primary, including right after a promotion.
    spec["managed"] = {
        "roles": [{"name": OWNER, "ensure": "present", "login": True, "passwordSecret": {"name": OWNER_SECRET}}]
    }
    if args.replica_of is not None:
        return spec | _replica_start(args.replica_of)
    spec["bootstrap"] = {"initdb": {"database": DATABASE, "owner": OWNER, "secret": {"name": OWNER_SECRET}}}
    spec["plugins"] = [{"name": BARMAN_PLUGIN, "isWALArchiver": True, "parameters": {"barmanObjectName": STORE}}]
    return spec


def _replica_start(replica_of: ReplicaOf) -> dict[str, Any]:
    """A replica cluster's `bootstrap`, `replica` and `externalClusters`: recovered from the active site's archive
    and following it; it archives nothing (one writer per archive). Promotion = role active: `replica.enabled`
    false, then the plugin archives."""
    source: dict[str, Any] = {
        "name": ACTIVE_SOURCE,
        "plugin": {
            "name": BARMAN_PLUGIN,
            "parameters": {"barmanObjectName": STORE, "serverName": DATABASE_CLUSTER},
        },
    }
    if replica_of.streaming_host is not None:
        # Streaming first, the archive as fallback; the active's replication certificates are copied here
        # under names of their own.
        source["connectionParameters"] = {
            "host": replica_of.streaming_host,
            "user": "streaming_replica",
            "dbname": "postgres",
            "sslmode": "verify-full",
        }
        source["sslKey"] = {"name": ACTIVE_REPLICATION_SECRET, "key": "tls.key"}
        source["sslCert"] = {"name": ACTIVE_REPLICATION_SECRET, "key": "tls.crt"}
        source["sslRootCert"] = {"name": ACTIVE_CA_SECRET, "key": "ca.crt"}
    return {
        "bootstrap": {
            "recovery": {
                "source": ACTIVE_SOURCE,
                "database": DATABASE,
                "owner": OWNER,
                "secret": {"name": OWNER_SECRET},
            }
        },
        "replica": {"enabled": True, "source": ACTIVE_SOURCE},
        "externalClusters": [source],
    }


def scheduled_backup_spec(schedule: str) -> dict[str, Any]:
    """The primary's daily base backup through the barman-cloud plugin (a replica cluster takes none)."""
    return {
        "schedule": schedule,
        "cluster": {"name": DATABASE_CLUSTER},
        "method": "plugin",
        "pluginConfiguration": {"name": BARMAN_PLUGIN},
        "backupOwnerReference": "self",
        "immediate": True,
    }


class PostgresDatabase(pulumi.ComponentResource):
    """CNPG Cluster, its object store and its scheduled backups.

    Outputs (registered; the attributes in brackets hold the same values):
    - ``cluster`` [cluster_name]: the CNPG Cluster's name (its Services are `<cluster>-rw`, `-ro`, `-r`);
    - ``database`` [database_name] and ``owner`` [owner_name]: the application database and its owning role;
    - ``ownerSecret`` [owner_secret_name]: the basic-auth Secret with the owner's password, for the application;
    - ``objectStore`` [object_store_name]: the barman-cloud ObjectStore the cluster archives to (or recovers from);
    - ``credentialsSecret`` [credentials_secret_name]: the Secret with the object store's S3 credentials;
    - ``host`` [host]: the read-write Service's DNS name; registered on a primary only;
    - ``replicaOf``: on a replica cluster only, the name of the external cluster it follows.
    """

    cluster: k8s.apiextensions.CustomResource
    cluster_name: str
    database_name: str
    owner_name: str
    owner_secret_name: str
    object_store_name: str
    credentials_secret_name: str
    host: str

    def __init__(self, name: str, args: PostgresDatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:postgres:PostgresDatabase", name, None, opts)
        self.cluster_name, self.database_name, self.owner_name = DATABASE_CLUSTER, DATABASE, OWNER
        self.owner_secret_name, self.object_store_name, self.credentials_secret_name = OWNER_SECRET, STORE, CREDENTIALS
        self.host = read_write_host(args.namespace)
        meta: Meta = {"namespace": args.namespace, "labels": labels(DATABASE_CLUSTER, "database")}
        owner = self._owner_secret(name, meta)
        credentials = self._credentials_secret(name, args, meta)
        object_store = k8s.apiextensions.CustomResource(
            f"{name}-store",
            api_version="barmancloud.cnpg.io/v1",
            kind="ObjectStore",
            metadata={**meta, "name": STORE},
            spec=object_store_spec(args.object_store),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[credentials]),
        )
        self.cluster = k8s.apiextensions.CustomResource(
            f"{name}-cluster",
            api_version="postgresql.cnpg.io/v1",
            kind="Cluster",
            # pulumi-kubernetes awaits no custom resource unless told what ready means: what depends on the Cluster
            # (the migration Job, Headscale on PostgreSQL) starts only once CloudNativePG reports it Ready.
            metadata=kept({**meta, "name": DATABASE_CLUSTER, "annotations": READY_AWAIT}),
            spec=cluster_spec(args),
            # Bootstrap only matters when the cluster is created; a promoted replica keeps its data.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[object_store, owner], retain_on_delete=True, ignore_changes=["spec.bootstrap"]
            ),
        )
        if args.replica_of is not None:
            self.register_outputs(self._outputs() | {"replicaOf": ACTIVE_SOURCE})
            return
        k8s.apiextensions.CustomResource(
            f"{name}-scheduled-backup",
            api_version="postgresql.cnpg.io/v1",
            kind="ScheduledBackup",
            metadata={**meta, "name": f"{DATABASE_CLUSTER}-daily"},
            spec=scheduled_backup_spec(args.backup_schedule),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]),
        )
        self.register_outputs(self._outputs() | {"host": self.host})

    def _owner_secret(self, name: str, meta: Meta) -> k8s.core.v1.Secret:
        """The owner's credentials (OWNER_SECRET), with a password generated once and kept in Pulumi's state."""
        child = pulumi.ResourceOptions(parent=self)
        password = random.RandomPassword(f"{name}-owner-password", length=32, special=False, opts=child)
        return k8s.core.v1.Secret(
            f"{name}-owner",
            # CNPG reloads a labelled Secret at once: a new password reaches the role without waiting.
            metadata={**meta, "name": OWNER_SECRET, "labels": {**meta["labels"], "cnpg.io/reload": "true"}},
            type="kubernetes.io/basic-auth",
            string_data={"username": OWNER, "password": pulumi.Output.secret(password.result)},
            opts=child,
        )

    def _credentials_secret(self, name: str, args: PostgresDatabaseArgs, meta: Meta) -> k8s.core.v1.Secret:
        """The object store's S3 credentials, as the ObjectStore names them (CREDENTIALS)."""
        return k8s.core.v1.Secret(
            f"{name}-s3",
            metadata={**meta, "name": CREDENTIALS},
            type="Opaque",
            string_data={
                "ACCESS_KEY_ID": pulumi.Output.secret(args.object_store_access_key_id),
                "ACCESS_SECRET_KEY": pulumi.Output.secret(args.object_store_secret_access_key),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _outputs(self) -> dict[str, str]:
        """The names every user of the database needs, primary or replica."""
        return {
            "cluster": self.cluster_name,
            "database": self.database_name,
            "owner": self.owner_name,
            "ownerSecret": self.owner_secret_name,
            "objectStore": self.object_store_name,
            "credentialsSecret": self.credentials_secret_name,
        }
