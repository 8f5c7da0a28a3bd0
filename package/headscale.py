"""HeadscaleServer as the component package exposes it: one Headscale, its identity, database and backup.

The Python component takes a database and an identity as unions of dataclasses; a schema has no unions, so the
choice is carried as optional inputs (``sqlite`` or ``postgres``; ``identity`` with imported keys or a stack name)
and checked here, with errors at the schema path.
"""

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
from pulumi.errors import InputPropertyError

from headscale_ha.components import headscale
from headscale_ha.components.config_types import Fqdn, IPAddress
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    HeadscaleSettings,
    Prefixes,
    base_domain_problem,
)
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import checked_value, default_settings, one_of, required, settings_of


class Identity(TypedDict):
    """Where the Noise and DERP keys come from; absent (or empty): both generated once and kept, protected, in the
    Pulumi state of the consumer's stack."""

    noise_private_key: NotRequired[pulumi.Input[str]]
    """The Noise key (`privkey:` + 64 hex), the server's identity to every client; a secret. Default: generated."""
    derp_private_key: NotRequired[pulumi.Input[str]]
    """The embedded DERP relay's key, different from the Noise key; a secret. Default: generated."""
    stack_name: NotRequired[str]
    (
        "`org/project/stack` of a stack that owns the identity (headscale-ha's identity/): its secret `identity` "
        "output holds both keys. Exclusive with the keys."
    )


class SqliteStorage(TypedDict):
    """SQLite on the pod's local storage (`backup.local`), restored from the NFS backup before Headscale serves and
    replicated by Litestream. Its size is `headscale.storageSize`, its StorageClass `cluster.storageClass`."""

    backup: types.Backup
    """The NFS target (required), Litestream, local storage, rehearsal, authentication and VolSync settings."""
    require_backup: NotRequired[bool]
    """Refuse to start without a backup: a standby must restore, never start empty. Default: `false`."""


class PostgresStorage(TypedDict):
    """PostgreSQL reached over the network (CloudNativePG's read-write Service, say): no volume, no backup here."""

    host: str
    """Server name; with `ssl` verify-full it must be a name in the server's certificate."""
    port: NotRequired[int]
    """Server port. Default: `5432`."""
    database: str
    """Database name."""
    user: str
    """User Headscale connects as."""
    ssl: NotRequired[str]
    """libpq sslmode: disable, allow, prefer, require, verify-ca or verify-full. Default: `verify-full`."""
    password_secret: str
    """Secret, in the namespace, holding the user's password."""
    password_key: NotRequired[str]
    """Key of the password in that Secret. Default: `password`."""
    ca_secret: NotRequired[str]
    (
        "Secret holding the CA that signed the server's certificate; only `caKey` is mounted. Default: the image's "
        "system trust store."
    )
    ca_key: NotRequired[str]
    """Key of the CA certificate (PEM) in that Secret. Default: `ca.crt`."""


class PolicyFile(TypedDict):
    """File mode: the tailnet policy Headscale enforces from its first start, from a ConfigMap the consumer publishes
    (depend on it with `dependsOn`)."""

    config_map: str
    """The ConfigMap holding the policy, in the server's namespace."""
    key: NotRequired[str]
    """Its key there. Default: `policy.json`."""
    sha256: str
    """SHA-256 (hex) of the policy text: a pod annotation, so a policy change restarts Headscale."""


class HeadscaleServerArgs(TypedDict):
    """What one Headscale server is made of."""

    namespace: str
    """Namespace of every object."""
    headscale: types.Headscale
    """The release, image, resources, DERP, OIDC, log level and replicas (0 stops it, never more than 1)."""
    cluster: types.Cluster
    """Placement: worker nodes or not, excluded nodes, eviction delay from a failed node; the StorageClass."""
    server_hostname: str
    """The public name clients reach: server_url is `https://<serverHostname>`."""
    base_domain: str
    """MagicDNS suffix of node names; neither `serverHostname` nor a parent domain of it."""
    sqlite: NotRequired[SqliteStorage]
    """SQLite, backed up to NFS; exactly one of `sqlite` and `postgres`."""
    postgres: NotRequired[PostgresStorage]
    """PostgreSQL; exactly one of `sqlite` and `postgres`."""
    identity: NotRequired[Identity]
    """Where the Noise and DERP keys come from. Default: both generated and kept in the stack's state."""
    backup_key_epoch: NotRequired[int]
    (
        "Epoch of the backup key derived from the Noise key, the same on every site (with `sqlite`, it is "
        "`sqlite.backup.auth.keyEpoch` and this must be absent or equal). Default: `1`."
    )
    prefixes: NotRequired[types.Prefixes]
    """Tailnet address ranges and their allocation. Default: Tailscale's ranges, sequential."""
    nameservers: NotRequired[list[str]]
    """Global resolvers pushed to clients, in order. Default: 1.1.1.1, 1.0.0.1."""
    split_dns: NotRequired[dict[str, list[str]]]
    """Split-DNS zone -> its resolvers. Default: none."""
    stun_address: NotRequired[str]
    """With `headscale.derp.embedded`: the public IP the STUN Service asks Cilium LB-IPAM for. Default: any."""
    oidc_client_secret: NotRequired[pulumi.Input[str]]
    (
        "With `headscale.oidc`: the client secret, written to the Secret `headscale-oidc`; a secret. Default: that "
        "Secret is someone else's to create."
    )
    policy_file: NotRequired[PolicyFile]
    """File mode: the policy Headscale enforces from its first start. Default: database mode."""
    metrics: NotRequired[bool]
    """Serve the Litestream sidecar's metrics. Default: `false`."""


def _addresses(values: Any, *path: str) -> tuple[str, ...]:
    return tuple(checked_value(IPAddress, value, *path, i) for i, value in enumerate(values))


def _identity(args: Mapping[str, Any]) -> headscale.IdentitySource:
    identity = args.get("identity") or {}
    keys = {k: identity.get(k) for k in ("noise_private_key", "derp_private_key")}
    if identity.get("stack_name") is not None:
        if any(v is not None for v in keys.values()):
            raise InputPropertyError(
                "identity.stackName", "identity.stackName reads both keys from that stack: leave out the keys"
            )
        return headscale.IdentityFromStack(stack_name=identity["stack_name"])
    if any(v is not None for v in keys.values()):
        return headscale.ImportedIdentity(**keys)
    return headscale.GeneratedIdentity()


def _database(
    args: Mapping[str, Any], settings: HeadscaleSettings, cluster: ClusterSettings
) -> tuple[headscale.SqliteStorage | headscale.PostgresStorage, int]:
    """The storage and the backup key epoch (the backup's, with SQLite)."""
    epoch = args.get("backup_key_epoch")
    if one_of(args, ("sqlite", "postgres")) == "sqlite":
        sqlite = args["sqlite"]
        backup = settings_of(BackupSettings, required(sqlite, "backup", "sqlite"), "sqlite", "backup")
        if backup.nfs is None:
            raise InputPropertyError("sqlite.backup.nfs", "sqlite.backup.nfs is required: SQLite is backed up there")
        if epoch is not None and epoch != backup.auth.key_epoch:
            raise InputPropertyError(
                "backupKeyEpoch",
                f"backupKeyEpoch {epoch} differs from sqlite.backup.auth.keyEpoch {backup.auth.key_epoch}: "
                "leave it out, or set both to the tailnet's epoch",
            )
        storage = headscale.SqliteStorage(
            size=settings.storage_size,
            storage_class=cluster.storage_class,
            backup=backup,
            require_backup=bool(sqlite.get("require_backup", False)),
            allow_empty_start=settings.allow_empty_start,
        )
        return storage, backup.auth.key_epoch
    postgres = args["postgres"]
    try:
        connection = PostgresConnection(
            host=required(postgres, "host", "postgres"),
            port=int(postgres.get("port", 5432)),
            name=required(postgres, "database", "postgres"),
            user=required(postgres, "user", "postgres"),
            ssl=postgres.get("ssl", "verify-full"),
        )
    except ValueError as exc:
        raise InputPropertyError("postgres.ssl", f"postgres.{exc}") from None
    storage = headscale.PostgresStorage(
        connection=connection,
        password_secret=required(postgres, "password_secret", "postgres"),
        password_key=postgres.get("password_key", "password"),
        ca_secret=postgres.get("ca_secret"),
        ca_key=postgres.get("ca_key", "ca.crt"),
    )
    return storage, 1 if epoch is None else int(epoch)


def _policy_file(args: Mapping[str, Any]) -> headscale.PolicyFile | None:
    policy = args.get("policy_file")
    if policy is None:
        return None
    sha256 = required(policy, "sha256", "policy_file")
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise InputPropertyError("policyFile.sha256", f"policyFile.sha256: not 64 lowercase hex digits, got {sha256!r}")
    return headscale.PolicyFile(
        config_map=required(policy, "config_map", "policy_file"), key=policy.get("key", "policy.json"), sha256=sha256
    )


def server_args(args: Mapping[str, Any]) -> headscale.HeadscaleServerArgs:
    """The Python component's args from the package's inputs; every input checked, the first problem raised."""
    settings = settings_of(HeadscaleSettings, args["headscale"], "headscale")
    cluster = settings_of(ClusterSettings, args["cluster"], "cluster")
    host = checked_value(Fqdn, args["server_hostname"], "server_hostname")
    base_domain = checked_value(Fqdn, args["base_domain"], "base_domain")
    problem = base_domain_problem(host, base_domain, host_key="serverHostname")
    if problem is not None:
        raise InputPropertyError("baseDomain", f"baseDomain {problem}, got {base_domain!r}")
    database, epoch = _database(args, settings, cluster)
    split = {zone: _addresses(servers, "split_dns", zone) for zone, servers in args.get("split_dns", {}).items()}
    stun = args.get("stun_address")
    return headscale.HeadscaleServerArgs(
        namespace=args["namespace"],
        settings=settings,
        metrics=bool(args.get("metrics", False)),
        replicas=settings.replicas,
        cluster=cluster,
        identity=_identity(args),
        backup_key_epoch=epoch,
        database=database,
        server_hostname=host,
        prefixes=default_settings(Prefixes, args, "prefixes"),
        stun_address=None if stun is None else checked_value(IPAddress, stun, "stun_address"),
        oidc_client_secret=args.get("oidc_client_secret") if settings.oidc is not None else None,
        base_domain=base_domain,
        nameservers=_addresses(args.get("nameservers", ["1.1.1.1", "1.0.0.1"]), "nameservers"),
        split_dns=split,
        policy_file=_policy_file(args),
    )


class HeadscaleServer(pulumi.ComponentResource):
    """One Headscale (a strict singleton Deployment), its identity, config, database and backup.  It holds a dynamic
    resource, the version gate that refuses to lower `headscale.version`: the engine runs it in a Python with
    headscale-ha installed (docs/package.md, "Dynamic resources")."""

    api_url: pulumi.Output[str]
    """In-cluster URL of Headscale's HTTP API (what Headplane and in-cluster tools use)."""
    service_name: pulumi.Output[str]
    """The ClusterIP Service (ports `http` and `metrics`) behind the public endpoint."""
    stun_service_name: pulumi.Output[str] | None
    """The LoadBalancer Service of the embedded DERP's STUN port; absent without the embedded relay."""
    identity_secret_name: pulumi.Output[str]
    """The Secret with the Noise and DERP keys (retained on destroy)."""
    oidc_secret_name: pulumi.Output[str] | None
    """The Secret the OIDC client secret is read from; absent without OIDC."""
    config_map_name: pulumi.Output[str]
    """The ConfigMap with config.yaml."""
    data_claim_name: pulumi.Output[str] | None
    """The SQLite claim on persistent local storage; absent on disposable storage and with PostgreSQL."""
    replicas: pulumi.Output[int]
    """1 serving, 0 stopped."""
    identity_fingerprint: pulumi.Output[str]
    """Plain SHA-256 fingerprint of the Noise key: stacks compare identities by it."""
    backup_key: pulumi.Output[str]
    """The backup key derived from the Noise key and the epoch (a secret): Headplane's `backupKey`."""

    @staticmethod
    def component_args(
        args: HeadscaleServerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> headscale.HeadscaleServerArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        return server_args(args)

    def __init__(self, name: str, args: HeadscaleServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:HeadscaleServer", name, None, opts)
        server = headscale.HeadscaleServer(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "api_url": server.api_url,
                "service_name": server.service_name,
                "stun_service_name": server.stun_service_name,
                "identity_secret_name": server.identity_secret_name,
                "oidc_secret_name": server.oidc_secret_name,
                "config_map_name": server.config_map_name,
                "data_claim_name": server.data_claim_name,
                "replicas": component_args.replicas,
                "identity_fingerprint": server.identity_fingerprint,
                "backup_key": pulumi.Output.secret(server.backup_key),
            },
        )
