"""HeadscaleServer: the strict singleton, its identity, its volume, its backup and its Service.

One replica at most, strategy Recreate (two pods never overlap), worker nodes only, and in the SQLite
stage no pod starts before the restore init container has checked the identity contract. Everything it
renders comes from ``HeadscaleServerArgs``; which stage, role or replica count applies is the caller's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pulumi_kubernetes.core.v1 import (
    ContainerArgsDict,
    ContainerPortArgsDict,
    EnvVarArgsDict,
    PodSpecArgsDict,
    ProbeArgsDict,
    SecretKeySelectorArgsDict,
    VolumeArgsDict,
    VolumeMountArgsDict,
)

from headscale_ha.components.headscale_config import (
    HTTP_PORT,
    METRICS_PORT,
    PASSWORD_ENV,
    STUN_PORT,
    HeadscaleConfigInput,
    HeadscaleDns,
    HeadscalePaths,
    PostgresConnection,
    SqliteDatabase,
    headscale_config_yaml,
)
from headscale_ha.components.identity import derived_backup_key, identity_fingerprint
from headscale_ha.components.litestream import CONFIG_VOLUME as LITESTREAM_CONFIG_VOLUME
from headscale_ha.components.litestream import LitestreamBackup, PodAccount, record_served
from headscale_ha.components.pod import (
    Meta,
    checksum,
    container_security,
    kept,
    labels,
    pod_security,
    resources,
    scheduling,
    selector,
)
from headscale_ha.components.replicated_sqlite import replicated_sqlite
from headscale_ha.components.serving_lease import (
    FailsafeAccounts,
    FailsafeAccountsArgs,
    ServedPod,
    ServingLease,
    ServingLeaseArgs,
)
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    HeadscaleSettings,
    Prefixes,
)
from headscale_ha.components.version_gate import HeadscaleVersionGate
from headscale_ha.components.workload import (
    DATA_VOLUME,
    PodRecoveryFacts,
    cluster_service,
    recovery_facts,
    singleton_deployment,
)

APP = "headscale"


def in_cluster_url(namespace: str) -> str:
    """The in-cluster URL of Headscale's HTTP API in ``namespace`` (what Headplane and in-cluster tools use)."""
    return f"http://{APP}.{namespace}.svc.cluster.local:{HTTP_PORT}"


PATHS = HeadscalePaths()
IDENTITY_SECRET = "headscale-identity"
#: The embedded DERP relay's STUN listener (UDP): reached by clients from the internet, so it has its own Service.
STUN_SERVICE = "headscale-stun"
#: Why the database password is an environment variable (checkov CKV_K8S_35 prefers files).
PASSWORD_ENV_REASON = (
    "Headscale reads the PostgreSQL password from its config or HEADSCALE_DATABASE_POSTGRES_PASS only (no password "
    "file option); the value comes from a Secret reference and is never rendered"
)
STUN_SHARING_KEY = "headscale-public"
STUN_CONTAINER_PORT: ContainerPortArgsDict = {"name": "stun", "container_port": STUN_PORT, "protocol": "UDP"}
NOISE_ITEM, DERP_ITEM = "noise.key", "derp.key"


#: The identity Secret as every pod that needs the Noise key mounts it (the server, the migration Job).
IDENTITY_VOLUME: VolumeArgsDict = {
    "name": "identity",
    "secret": {
        "secret_name": IDENTITY_SECRET,
        "default_mode": 0o440,
        "items": [
            {"key": NOISE_ITEM, "path": PATHS.noise_key.rsplit("/", 1)[1]},
            {"key": DERP_ITEM, "path": PATHS.derp_key.rsplit("/", 1)[1]},
        ],
    },
}
IDENTITY_MOUNT: VolumeMountArgsDict = {
    "name": "identity",
    "mount_path": PATHS.noise_key.rsplit("/", 1)[0],
    "read_only": True,
}
CONFIG_MAP = "headscale-config"
DATA_CLAIM = f"{APP}-data"
DB_FILE = "db.sqlite"
#: The pod volume of the server's config (what a gate serves).
SERVER_CONFIG_VOLUME_NAME = "config"
#: Where the server reads its config.
SERVER_CONFIG_PATH = "/etc/headscale/config.yaml"
SERVER_CONFIG_VOLUME: VolumeArgsDict = {
    "name": SERVER_CONFIG_VOLUME_NAME,
    "config_map": {"name": CONFIG_MAP, "default_mode": 0o444},
}
SERVER_CONFIG_MOUNT: VolumeMountArgsDict = {
    "name": SERVER_CONFIG_VOLUME_NAME,
    "mount_path": SERVER_CONFIG_PATH,
    "sub_path": "config.yaml",
    "read_only": True,
}
OIDC_SECRET = "headscale-oidc"
OIDC_ITEM = "client-secret"
OIDC_VOLUME: VolumeArgsDict = {
    "name": "oidc",
    "secret": {
        "secret_name": OIDC_SECRET,
        "default_mode": 0o440,
        "items": [{"key": OIDC_ITEM, "path": PATHS.oidc_client_secret.rsplit("/", 1)[1]}],
    },
}
OIDC_MOUNT: VolumeMountArgsDict = {
    "name": "oidc",
    "mount_path": PATHS.oidc_client_secret.rsplit("/", 1)[0],
    "read_only": True,
}


@dataclass(frozen=True, kw_only=True)
class PolicyFile:
    """The rendered tailnet policy Headscale reads in file mode (a ConfigMap someone else publishes).

    Headscale reads the file when it starts (SIGHUP would reload it, but nothing in a restricted pod can signal
    it), so the pod carries the policy's hash and a change restarts it."""

    config_map: str  # the ConfigMap holding the policy, in the server's namespace
    key: str = "policy.json"  # its key there
    sha256: str  # hash of the policy text: a pod annotation, so a policy change rolls the pod
    published_by: pulumi.Resource | None = None  # the ConfigMap's resource: the pod is not created before it exists


def policy_files(policy: PolicyFile) -> tuple[VolumeArgsDict, VolumeMountArgsDict]:
    """The policy file's volume and mount: one file, read-only, at ``PATHS.policy``. A subPath mount keeps the file
    the pod started with (what Headscale loaded), even while a new policy waits for the pod to roll."""
    file_name = PATHS.policy.rsplit("/", 1)[1]
    volume: VolumeArgsDict = {
        "name": "policy",
        "config_map": {
            "name": policy.config_map,
            "default_mode": 0o444,
            "items": [{"key": policy.key, "path": file_name}],
        },
    }
    mount: VolumeMountArgsDict = {
        "name": "policy",
        "mount_path": PATHS.policy,
        "sub_path": file_name,
        "read_only": True,
    }
    return volume, mount


def stun_annotations(public_address: str | None) -> dict[str, str]:
    """Clients send STUN to the address the public hostname resolves to: with Cilium LB-IPAM the Service asks for
    ``public_address`` and shares it (sharing key) with the public Gateway's Service, which must carry the same
    key. Pulumi does not wait for an address: the pool is the user's, and a standby has no pod behind it."""
    annotations = {"pulumi.com/skipAwait": "true"}
    if public_address is not None:
        annotations |= {"lbipam.cilium.io/ips": public_address, "lbipam.cilium.io/sharing-key": STUN_SHARING_KEY}
    return annotations


def server_files(
    *, oidc: bool, policy: PolicyFile | None = None
) -> tuple[list[VolumeArgsDict], list[VolumeMountArgsDict]]:
    """Volumes and mounts of every file the rendered config.yaml names: each container that loads the config
    (the server, the migration Job's configtest steps) needs all of them, or Headscale stops reading it.
    ``oidc``: the config has an OIDC block, so it names the client-secret file; ``policy``: the config is in file
    mode and names the policy file."""
    volumes = [SERVER_CONFIG_VOLUME, IDENTITY_VOLUME]
    mounts = [SERVER_CONFIG_MOUNT, IDENTITY_MOUNT]
    if oidc:
        volumes.append(OIDC_VOLUME)
        mounts.append(OIDC_MOUNT)
    if policy is not None:
        volume, mount = policy_files(policy)
        volumes.append(volume)
        mounts.append(mount)
    return volumes, mounts


# ------------------------------------------------------------------------------------------ identity sources


@dataclass(frozen=True, kw_only=True)
class GeneratedIdentity:
    """Both keys are 32 random bytes kept in Pulumi state, protected: generated once, never replaced."""


@dataclass(frozen=True, kw_only=True)
class ImportedIdentity:
    """Keys that exist already (a server being adopted, a standby given the keys): `privkey:` + 64 hex each.

    The component makes them Pulumi secrets before using them (plain strings or secret Outputs both do).
    A key left None is generated as in ``GeneratedIdentity``.
    """

    noise_private_key: pulumi.Input[str] | None  # the Noise key: the server's identity to every client
    derp_private_key: pulumi.Input[str] | None  # the embedded DERP relay's key; must differ from the Noise key


@dataclass(frozen=True, kw_only=True)
class IdentityFromStack:
    """The keys of a stack that owns the identity (identity/ of headscale-ha), read from its outputs."""

    stack_name: str  # `org/project/stack`: secret `identity` {noisePrivateKey, derpPrivateKey}, plain `fingerprint`


#: Where the Noise and DERP private keys come from.
IdentitySource = GeneratedIdentity | ImportedIdentity | IdentityFromStack


# ------------------------------------------------------------------------------------------ database


@dataclass(frozen=True, kw_only=True)
class SqliteStorage:
    """SQLite on disposable or persistent local storage (`backup.local`), restored before Headscale serves and
    replicated by Litestream."""

    size: str  # capacity of the volume (the emptyDir's limit, or the claim's size), a Kubernetes quantity
    storage_class: str | None = None  # StorageClass of the claim; None: the cluster's default
    backup: BackupSettings  # the NFS target (required), Litestream and optional VolSync settings
    require_backup: bool = False  # refuse to start without a backup (a standby must restore, never start empty)
    #: After a real loss of both the volume and the backup of a site that has served: today's UTC date lets the
    #: restore start empty on that date only (see LitestreamBackupArgs.allow_empty_start); None: refused (exit 24).
    allow_empty_start: str | None = None


@dataclass(frozen=True, kw_only=True)
class PostgresStorage:
    """PostgreSQL reached over the network: no volume, so the pod reschedules anywhere."""

    connection: PostgresConnection  # host, port, database, user and TLS mode
    password_secret: str  # Secret in the namespace holding the user's password
    password_key: str = "password"  # key of the password in that Secret
    #: Secret holding the CA that signed the server's certificate (CloudNativePG's `<cluster>-ca`); only its
    #: ``ca_key`` item is mounted, never the CA's private key beside it. None: the image's system trust store.
    ca_secret: str | None = None
    ca_key: str = "ca.crt"  # key of the CA certificate (PEM) in that Secret


#: Where every client of PostgreSQL (the server, the migration Job) finds the server's CA certificate.
POSTGRES_CA_DIR = "/etc/headscale/postgres-ca"
POSTGRES_CA_FILE = f"{POSTGRES_CA_DIR}/ca.crt"


def postgres_ca(
    storage: PostgresStorage,
) -> tuple[list[VolumeArgsDict], list[VolumeMountArgsDict], list[EnvVarArgsDict]]:
    """Volumes, mounts and env that let a libpq/pgx client verify the server: the CA certificate alone (the
    Secret's other keys, the CA's private key among them, stay out of the pod), read-only, named by PGSSLROOTCERT.
    Nothing when no CA Secret is configured."""
    if storage.ca_secret is None:
        return [], [], []
    volume: VolumeArgsDict = {
        "name": "postgres-ca",
        "secret": {
            "secret_name": storage.ca_secret,
            "default_mode": 0o444,
            "items": [{"key": storage.ca_key, "path": POSTGRES_CA_FILE.rsplit("/", 1)[1]}],
        },
    }
    mount: VolumeMountArgsDict = {"name": "postgres-ca", "mount_path": POSTGRES_CA_DIR, "read_only": True}
    return [volume], [mount], [{"name": "PGSSLROOTCERT", "value": POSTGRES_CA_FILE}]


# ------------------------------------------------------------------------------------------ the component


@dataclass(frozen=True, kw_only=True)
class HeadscaleServerArgs:
    """What one Headscale server is made of; every field is rendered into its objects or its config.yaml."""

    namespace: str  # where every object goes
    #: The stack's `headscale` section, whole: release and image, resources, log level, DERP, OIDC, the ephemeral
    #: timeout and the downgrade override. It reaches config.yaml through HeadscaleConfigInput.from_settings, the
    #: one place its keys are mapped. (Its ``replicas``, ``storage_size`` and ``allow_empty_start`` are read where
    #: the site decides them: ``replicas`` below and ``database``.)
    settings: HeadscaleSettings
    metrics: bool = False  # serve the Litestream sidecar's metrics (scraped with monitoring on)
    replicas: int = 1  # 1 serves, 0 stops (a standby, a migration); never more: Headscale is a strict singleton
    cluster: ClusterSettings  # placement: worker nodes or not, excluded nodes, eviction delay from a failed node
    identity: IdentitySource = field(default_factory=GeneratedIdentity)  # where the Noise and DERP keys come from
    #: The epoch of the backup key derived from the Noise key (components/identity.py); every site of a tailnet
    #: must use the same one; bumping it rotates the key.
    backup_key_epoch: int = 1
    database: SqliteStorage | PostgresStorage  # where Headscale keeps its state
    server_hostname: str  # public name clients reach: server_url https://<server_hostname>
    prefixes: Prefixes = field(default_factory=Prefixes)  # tailnet address ranges and their allocation
    stun_address: str | None = None  # public IP the STUN Service asks Cilium LB-IPAM for; None: any address
    #: With ``settings.oidc``: the client secret, made a Pulumi secret and written to the Secret `headscale-oidc`;
    #: None: that Secret is someone else's to create.
    oidc_client_secret: pulumi.Input[str] | None = None
    base_domain: str  # MagicDNS suffix of node names; neither server_hostname nor a parent of it
    nameservers: tuple[str, ...] = ("1.1.1.1", "1.0.0.1")  # global resolvers pushed to clients, in order
    split_dns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # split-DNS zone -> its resolvers
    #: File mode: the policy Headscale enforces from its first start. None: database mode, where the policy is
    #: whatever was last written over the API, and everything is allowed until a first write.
    policy_file: PolicyFile | None = None
    #: Automatic failover (SQLite only): the pod serves only while its site holds the witness Lease
    #: (docs/witness-lease.md); None: it serves whenever ``replicas`` is 1.
    lease: ServingLeaseArgs | None = None
    #: The accounts the other sites' renewers vouch through in this cluster (made before automatic failover is on,
    #: so that every site can hand its tokens to the others first); None: none.
    failsafe_accounts: FailsafeAccountsArgs | None = None


def _node_key(name: str, imported: pulumi.Input[str] | None, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """`privkey:` + 64 hex: imported (as a secret), or 32 random bytes kept in Pulumi state."""
    if imported is not None:
        return pulumi.Output.secret(imported)
    # Protected: these bytes exist only in the Pulumi state; `destroy` or a replacement would lose the tailnet's
    # identity for good, so both refuse until someone unprotects them on purpose.
    protected = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True))
    key = random.RandomBytes(name, length=32, opts=protected)
    return pulumi.Output.secret(key.hex.apply(lambda value: f"privkey:{value}"))


def _serve_args(*, gated: bool) -> list[str]:
    """Headscale's arguments. Behind the lease it is told where its config is: after a fence the path is an empty
    directory, and Headscale started with ``-c`` exits, where without it Headscale looks elsewhere and falls back to
    its defaults."""
    return ["serve", "-c", SERVER_CONFIG_PATH] if gated else ["serve"]


def headscale_config_input(args: HeadscaleServerArgs) -> HeadscaleConfigInput:
    """The renderer's inputs: the args' own, plus where this pod mounts the database and the key files."""
    database: SqliteDatabase | PostgresConnection
    if isinstance(args.database, SqliteStorage):
        database = SqliteDatabase(path=f"{PATHS.data_dir}/{DB_FILE}")
    else:
        database = args.database.connection
    return HeadscaleConfigInput.from_settings(
        args.settings,
        server_hostname=args.server_hostname,
        prefixes=args.prefixes,
        dns=HeadscaleDns(base_domain=args.base_domain, nameservers=args.nameservers, split=args.split_dns),
        database=database,
        paths=PATHS,
        policy_file=args.policy_file is not None,
    )


class HeadscaleServer(pulumi.ComponentResource):
    """The Headscale Deployment and everything only it uses.

    Outputs (registered; the attributes in brackets hold the same values):
    - ``apiUrl`` [api_url]: the in-cluster URL of Headscale's HTTP API (what Headplane and in-cluster tools use);
    - ``service`` [service_name]: the ClusterIP Service (ports `http` and `metrics`) behind the public endpoint;
    - ``stunService`` [stun_service_name]: the LoadBalancer Service of the embedded DERP's STUN port, or None;
    - ``identitySecret`` [identity_secret_name]: the Secret with the Noise and DERP keys (retained on destroy);
    - ``oidcSecret`` [oidc_secret_name]: the Secret the OIDC client secret is read from, or None without OIDC;
    - ``configMap`` [config_map_name]: the ConfigMap with config.yaml;
    - ``dataClaim`` [data_claim_name]: the SQLite claim on persistent storage, or None (disposable, PostgreSQL);
    - ``replicas``: 1 serving, 0 stopped.
    The keys themselves are the secret Outputs ``noise_key`` and ``derp_key`` (not registered);
    ``identity_fingerprint`` is the plain fingerprint of the Noise key (components/identity.py), as the identity
    stack exports it for IdentityFromStack, else computed from the key.
    """

    identity: k8s.core.v1.Secret
    config_map: k8s.core.v1.ConfigMap
    volume: k8s.core.v1.PersistentVolumeClaim | None
    backup: LitestreamBackup | None
    lease: ServingLease | None  # with automatic failover: the witness lease's objects in this cluster
    data_volume: VolumeArgsDict  # the pod volume `data`: SQLite's (see replicated_sqlite) or a scratch emptyDir
    version_gate: HeadscaleVersionGate
    deployment: k8s.apps.v1.Deployment
    pod_spec: PodSpecArgsDict
    recovery_facts: PodRecoveryFacts  # what the pod spec says about its recovery (the site's `recovery` output)
    service: k8s.core.v1.Service
    stun_service: k8s.core.v1.Service | None = None
    api_url: str
    service_name: str
    stun_service_name: str | None
    identity_secret_name: str
    oidc_secret_name: str | None
    config_map_name: str
    data_claim_name: str | None
    noise_key: pulumi.Output[str]
    derp_key: pulumi.Output[str]
    identity_fingerprint: pulumi.Output[str]
    backup_key: pulumi.Output[str]

    def __init__(self, name: str, args: HeadscaleServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:headscale:HeadscaleServer", name, None, opts)
        if args.replicas not in (0, 1):
            raise ValueError(f"replicas {args.replicas}: Headscale is a strict singleton, so 0 or 1")
        child = pulumi.ResourceOptions(parent=self)
        meta: Meta = {"namespace": args.namespace, "labels": labels(APP, "control-plane")}

        self._backup_key_epoch = args.backup_key_epoch
        self.noise_key, self.derp_key, self.identity_fingerprint, self.backup_key = self._keys(
            name, args.identity, child
        )
        self.identity = self._identity_secret(name, meta)
        oidc_secret = self._oidc_secret(name, args, meta)
        config_text = headscale_config_yaml(headscale_config_input(args))
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={**meta, "name": CONFIG_MAP},
            data={"config.yaml": config_text},
            opts=child,
        )
        self.volume, self.backup, self.data_volume = self._data_volume(name, args, meta)
        # Headscale's migrations are one-way: `pulumi preview` refuses a lower version than the one deployed (the
        # engine hands the gate its previous inputs), and the Deployment only rolls after the gate passed.
        settings = args.settings
        self.version_gate = HeadscaleVersionGate(
            f"{name}-version-gate", settings.version, child, allow_downgrade_from=settings.allow_downgrade_from
        )
        # Kept: the recovery model (program/recovery.py) reads tolerations, the restore's limits and probes from it.
        self.pod_spec = self._pod_spec(args)
        self.lease = self._lease(name, args, meta["namespace"]) if args.lease is not None else None
        if self.lease is not None:
            self.pod_spec = self.lease.gate(self.pod_spec)
        if args.failsafe_accounts is not None:
            FailsafeAccounts(f"{name}-failsafe-accounts", args.failsafe_accounts, child)
        self.recovery_facts = recovery_facts(APP, self.pod_spec)
        self.deployment = self._deployment(name, args, meta, config_text, oidc_secret)
        if self.backup is not None and (args.lease is None or self.backup.args.require_backup):
            # The served witness, once this rollout is ready: a later loss of both volumes is refused, not emptied.
            # Behind the lease nothing awaits readiness, and which site served is the Lease's: only a standby's
            # witness (it must restore, never start empty), as `standby`, is written then; one written before stays.
            replicas = args.replicas if args.lease is None else 0
            record_served(self.backup, self.deployment, replicas=replicas, parent=self)
        self.service = cluster_service(
            f"{name}-service", meta=meta, app=APP, ports={"http": HTTP_PORT, "metrics": METRICS_PORT}, parent=self
        )
        if args.settings.derp.embedded:
            self.stun_service = self._stun_service(name, args, meta)
        self._register_names(args)

    def _identity_secret(self, name: str, meta: Meta) -> k8s.core.v1.Secret:
        """The Secret with the Noise and DERP keys, mounted by the server and the migration Job."""
        return k8s.core.v1.Secret(
            f"{name}-identity",
            metadata=kept({**meta, "name": IDENTITY_SECRET}),
            type="Opaque",
            string_data={NOISE_ITEM: self.noise_key, DERP_ITEM: self.derp_key},
            # Retained: `destroy` leaves the keys in the cluster (the restore's identity check needs them).
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )

    def _oidc_secret(self, name: str, args: HeadscaleServerArgs, meta: Meta) -> k8s.core.v1.Secret | None:
        """The Secret `headscale-oidc` with the OIDC client secret, when the args hold it (else someone else's)."""
        if args.settings.oidc is None or args.oidc_client_secret is None:
            return None
        return k8s.core.v1.Secret(
            f"{name}-oidc",
            metadata={**meta, "name": OIDC_SECRET},
            type="Opaque",
            string_data={OIDC_ITEM: pulumi.Output.secret(args.oidc_client_secret)},
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _data_volume(
        self, name: str, args: HeadscaleServerArgs, meta: Meta
    ) -> tuple[k8s.core.v1.PersistentVolumeClaim | None, LitestreamBackup | None, VolumeArgsDict]:
        """The claim, the backup and the pod volume `data`: on SQLite the disposable or persistent volume the backup
        restores into (see replicated_sqlite: signed, with the position recorder and the pre-upgrade snapshot, and
        its restore rehearsal); on PostgreSQL a scratch directory alone."""
        sqlite = args.database
        if not isinstance(sqlite, SqliteStorage):
            return None, None, {"name": DATA_VOLUME, "empty_dir": {"size_limit": "64Mi"}}
        backed_up = replicated_sqlite(
            name,
            parent=self,
            meta=meta,
            backup=sqlite.backup,
            storage_class=sqlite.storage_class,
            require_backup=sqlite.require_backup,
            allow_empty_start=sqlite.allow_empty_start,
            app=APP,
            size=sqlite.size,
            data_dir=PATHS.data_dir,
            db_file=DB_FILE,
            identity_fingerprint=self.identity_fingerprint,
            backup_key=self.backup_key,
            upgrade_version=args.settings.version,
            metrics=args.metrics,
            record_position=True,
            cluster=args.cluster,
        )
        return backed_up.claim, backed_up.backup, backed_up.volume

    def _deployment(
        self,
        name: str,
        args: HeadscaleServerArgs,
        meta: Meta,
        config_text: str,
        oidc_secret: k8s.core.v1.Secret | None,
    ) -> k8s.apps.v1.Deployment:
        """The singleton Deployment of ``pod_spec``, rolled by a change of its config, backup config or policy, and
        created after everything its pod reads (and the version gate)."""
        policy = args.policy_file
        pod_annotations = {
            "checksum/config": checksum(config_text, self.backup.config_checksum if self.backup else ""),
        }
        if policy is not None:
            pod_annotations["checksum/policy"] = policy.sha256
        return singleton_deployment(
            f"{name}-deployment",
            meta=meta,
            app=APP,
            component="control-plane",
            replicas=args.replicas,
            pod_spec=self.pod_spec,
            annotations=pod_annotations,
            skip_reasons={"CKV_K8S_35": PASSWORD_ENV_REASON} if isinstance(args.database, PostgresStorage) else None,
            await_ready=args.lease is None,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    self.version_gate,
                    self.config_map,
                    self.identity,
                    *([oidc_secret] if oidc_secret is not None else []),
                    *([policy.published_by] if policy and policy.published_by else []),
                    *(self.backup.pod_dependencies if self.backup is not None else []),
                    *(self.lease.dependencies if self.lease is not None else []),
                ],
            ),
        )

    def _lease(self, name: str, args: HeadscaleServerArgs, namespace: str) -> ServingLease:
        """The witness lease's objects: the gate copies Headscale's and Litestream's config into ``serving``, where
        every container then reads it (a fence empties it)."""
        assert args.lease is not None
        if self.backup is None or not isinstance(args.database, SqliteStorage):
            raise ValueError(
                "lease: automatic failover needs the SQLite stage (a PostgreSQL replica cluster is promoted by hand)"
            )
        backup = args.database.backup
        pod = ServedPod(
            app=APP,
            namespace=namespace,
            image=backup.auth.recorder_image,
            resources=resources(backup.litestream.resources),
            service_account=self.backup.service_account_name,
            served={SERVER_CONFIG_VOLUME_NAME: "headscale", LITESTREAM_CONFIG_VOLUME: "litestream"},
        )
        return ServingLease(f"{name}-lease", args.lease, pod, pulumi.ResourceOptions(parent=self))

    def _stun_service(self, name: str, args: HeadscaleServerArgs, meta: Meta) -> k8s.core.v1.Service:
        """The embedded DERP relay's STUN port, on a LoadBalancer Service of its own (see ``stun_annotations``)."""
        return k8s.core.v1.Service(
            f"{name}-stun",
            metadata={**meta, "name": STUN_SERVICE, "annotations": stun_annotations(args.stun_address)},
            spec={
                "type": "LoadBalancer",
                # Local: STUN answers with the source address it sees, so it must be the client's own.
                "external_traffic_policy": "Local",
                "selector": selector(APP),
                "ports": [{"name": "stun", "port": STUN_PORT, "target_port": "stun", "protocol": "UDP"}],
            },
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _register_names(self, args: HeadscaleServerArgs) -> None:
        """The names other programs need, as attributes and as the registered outputs."""
        self.api_url = in_cluster_url(args.namespace)
        self.service_name = APP
        self.stun_service_name = STUN_SERVICE if args.settings.derp.embedded else None
        self.identity_secret_name = IDENTITY_SECRET
        self.oidc_secret_name = OIDC_SECRET if args.settings.oidc is not None else None
        self.config_map_name = CONFIG_MAP
        self.data_claim_name = DATA_CLAIM if self.volume is not None else None
        self.register_outputs(
            {
                "apiUrl": self.api_url,
                "service": self.service_name,
                "stunService": self.stun_service_name,
                "identitySecret": self.identity_secret_name,
                "oidcSecret": self.oidc_secret_name,
                "configMap": self.config_map_name,
                "dataClaim": self.data_claim_name,
                "replicas": args.replicas,
            }
        )

    def _keys(
        self, name: str, identity: IdentitySource, opts: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], pulumi.Output[str], pulumi.Output[str], pulumi.Output[str]]:
        """The Noise and DERP private keys, as secrets, the Noise key's plain fingerprint and the backup key (a
        secret, derived from the Noise key and ``backup_key_epoch``: the same on every site of the tailnet)."""
        epoch = self._backup_key_epoch
        if isinstance(identity, IdentityFromStack):
            source = pulumi.StackReference(f"{name}-identity-stack", stack_name=identity.stack_name, opts=opts)
            keys = source.require_output("identity")
            noise = pulumi.Output.secret(keys.apply(lambda value: value["noisePrivateKey"]))
            derp = pulumi.Output.secret(keys.apply(lambda value: value["derpPrivateKey"]))
            backup = pulumi.Output.secret(noise.apply(lambda key: derived_backup_key(key, epoch)))
            return noise, derp, source.require_output("fingerprint"), backup
        noise_import: pulumi.Input[str] | None = None
        derp_import: pulumi.Input[str] | None = None
        if isinstance(identity, ImportedIdentity):
            noise_import, derp_import = identity.noise_private_key, identity.derp_private_key
        noise = _node_key(f"{name}-noise-key", noise_import, opts)
        # A SHA-256 of the key reveals nothing about it: plain, so stacks can compare identities.
        fingerprint = pulumi.Output.unsecret(noise.apply(identity_fingerprint))
        backup = pulumi.Output.secret(noise.apply(lambda key: derived_backup_key(key, epoch)))
        return noise, _node_key(f"{name}-derp-key", derp_import, opts), fingerprint, backup

    def _pod_spec(self, args: HeadscaleServerArgs) -> PodSpecArgsDict:
        volumes, mounts = server_files(oidc=args.settings.oidc is not None, policy=args.policy_file)
        volumes.extend(
            [
                {"name": "run", "empty_dir": {"medium": "Memory", "size_limit": "8Mi"}},
                {"name": "tmp", "empty_dir": {"size_limit": "64Mi"}},
            ]
        )
        mounts.extend([{"name": "run", "mount_path": PATHS.run_dir}, {"name": "tmp", "mount_path": "/tmp"}])
        init_containers: list[ContainerArgsDict] = []
        # SQLite: the disposable or persistent volume the backup restores into; PostgreSQL: a scratch directory.
        volumes.append(self.data_volume)
        mounts.append({"name": DATA_VOLUME, "mount_path": PATHS.data_dir})
        if self.backup is not None:
            volumes.extend(self.backup.pod_volumes)
            init_containers = self.backup.pod_init_containers
        http_probe: ProbeArgsDict = {"http_get": {"path": "/health", "port": "http"}, "timeout_seconds": 3}
        env: list[EnvVarArgsDict] = []
        if isinstance(args.database, PostgresStorage):
            # Headscale has no password file option: the password reaches it as an env var, from its Secret.
            secret_ref: SecretKeySelectorArgsDict = {
                "name": args.database.password_secret,
                "key": args.database.password_key,
            }
            env.append({"name": PASSWORD_ENV, "value_from": {"secret_key_ref": secret_ref}})
            ca_volumes, ca_mounts, ca_env = postgres_ca(args.database)
            volumes += ca_volumes
            mounts += ca_mounts
            env += ca_env
        container: ContainerArgsDict = {
            "name": APP,
            "image": args.settings.image,
            "args": _serve_args(gated=args.lease is not None),
            "env": env,
            "ports": [
                {"name": "http", "container_port": HTTP_PORT, "protocol": "TCP"},
                {"name": "metrics", "container_port": METRICS_PORT, "protocol": "TCP"},
                *([STUN_CONTAINER_PORT] if args.settings.derp.embedded else []),
            ],
            "startup_probe": {**http_probe, "period_seconds": 5, "failure_threshold": 60},
            "liveness_probe": {**http_probe, "period_seconds": 15, "failure_threshold": 4},
            "readiness_probe": {**http_probe, "period_seconds": 5, "failure_threshold": 2},
            "resources": resources(args.settings.resources),
            "security_context": container_security(),
            "volume_mounts": mounts,
        }
        if not env:
            del container["env"]
        account: PodAccount = self.backup.pod_account() if self.backup is not None else {}
        return {
            **account,
            "automount_service_account_token": False,
            "enable_service_links": False,
            "termination_grace_period_seconds": 30,
            "security_context": pod_security(),
            **scheduling(args.cluster),
            "init_containers": init_containers,
            "containers": [container],
            "volumes": volumes,
        }
