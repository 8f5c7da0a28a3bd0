"""The settings the package's components take, as plain TypedDicts: generated, do not edit.

Written by `make docs` (tools/package_types.py) from the pydantic models of components/settings/, which
validate every value the components receive; the descriptions are the models'.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from typing import NotRequired, TypedDict

from headscale_ha.components.settings import FailoverMode, LocalStorage, RouteKind

__all__ = [
    "ApiServer",
    "Backup",
    "BackupAuth",
    "Cluster",
    "ComputeResources",
    "Derp",
    "Endpoint",
    "FailoverMode",
    "Headscale",
    "Litestream",
    "LocalStorage",
    "LocalVolume",
    "Nfs",
    "Oidc",
    "Prefixes",
    "Proxy",
    "Rehearsal",
    "ResourceAmounts",
    "RouteKind",
    "VolSync",
]


class ApiServer(TypedDict):
    """The cluster's Kubernetes API server, as the gateway's proxies reach it."""

    host: str
    """Address of the cluster's API server (VIP or DNS name) the gateway proxies to."""
    port: NotRequired[int]
    """API server port. Default: `6443`."""


class Nfs(TypedDict):
    """Where the Litestream replicas live. Pods reach it only through a claim: `restricted` admits no `nfs:` volume."""

    server: NotRequired[str]
    """NFS server (name or IP) of the static PersistentVolume; required unless `storageClass` is set. Default: none."""
    path: NotRequired[str]
    (
        "Exported directory of the static PersistentVolume; each application replicates to its own subdirectory "
        "(`headscale`, `headplane`), which must exist and be writable by UID 65532. Default: none."
    )
    storage_class: NotRequired[str]
    (
        "StorageClass that provisions the backup claim (e.g. csi-driver-nfs) instead of a static nfs "
        "PersistentVolume; a standby restores only if the class maps both sites to the same directory. Default: "
        "none."
    )
    size: NotRequired[str]
    """Capacity of the backup volume and claim. Default: `10Gi`."""


class ResourceAmounts(TypedDict):
    """An amount of CPU and memory."""

    cpu: str
    """CPU, as a Kubernetes quantity (cores)."""
    memory: str
    """Memory, as a Kubernetes quantity (bytes)."""


class ComputeResources(TypedDict):
    """Requests and limits of one container; limits must not be below requests."""

    requests: ResourceAmounts
    """Resources the scheduler reserves."""
    limits: ResourceAmounts
    """Hard ceiling; memory above it OOM-kills the container."""


class Litestream(TypedDict):
    """The Litestream sidecar that replicates each SQLite database, and its restore."""

    image: NotRequired[str]
    """Litestream image. Default: `docker.io/litestream/litestream:0.5.17`."""
    sync_interval: NotRequired[str]
    """How often WAL changes are shipped to the replica. Default: `1s`."""
    retention: NotRequired[str]
    """How long snapshots and WAL segments are kept. Default: `168h`."""
    resources: NotRequired[ComputeResources]
    """Sidecar resources. Default: the defaults of each field."""
    restore_resources: NotRequired[ComputeResources]
    (
        "Resources of the restore (init container, and the rehearsal Job). Restoring costs about 1 CPU-second per "
        "100 MB and uses more than one core: under the sidecar's 200m limit it takes 5.6 times longer (`make "
        "bench`). An init container's request does not add to the pod's steady-state request. Default: the defaults "
        "of each field."
    )


class LocalVolume(TypedDict):
    """The application's own copy of its database: Headscale's in the sqlite stage, Headplane's always."""

    storage: NotRequired[LocalStorage]
    (
        "`disposable`: an emptyDir (or a generic ephemeral volume of `ephemeralStorageClass`) per pod; a "
        "replacement pod starts on any eligible node and restores from the backup with no volume to detach; a node "
        "loss loses at most the unreplicated tail (about `syncInterval` + 1s), a graceful stop nothing. "
        "`persistent`: a retained PVC of `cluster.storageClass`; a node loss loses nothing, but an RWO volume stays "
        "attached to the dead node for about 6 minutes before the pod can start elsewhere. See `recovery`. Default: "
        "`disposable`."
    )
    ephemeral_storage_class: NotRequired[str]
    (
        "`disposable` only: StorageClass (node-local, e.g. local-path) of a generic ephemeral volume per pod, "
        "deleted with the pod; default: an emptyDir on the node's disk, capped at the storage size. Default: none."
    )


class Rehearsal(TypedDict):
    """A CronJob per application that restores the latest replica into scratch and checks it, read-only."""

    enabled: NotRequired[bool]
    """Run the restore rehearsal CronJobs. Default: `true`."""
    schedule: NotRequired[str]
    """Cron schedule (five fields, the cluster's time zone). Default: `17 4 * * *`."""
    max_age: NotRequired[str]
    (
        "The rehearsal fails when the replica's newest transaction is older: replication stopped, or the database "
        "was idle that long (a quiet tailnet writes rarely; raise it rather than ignore failures). Default: `168h`."
    )


class BackupAuth(TypedDict):
    """Authenticated backups: the restore (and the rehearsal) refuse a replica this tailnet's key did not sign."""

    max_age: NotRequired[str]
    (
        "The restore refuses a replica whose manifest was signed longer ago (exit 44): the signer re-signs at least "
        "every minute while the application runs, so an older one is a rollback (an NFS snapshot, a copied old "
        "directory) or a writer stopped that long. A day by default, so that a promotion the day the active is "
        "lost, or a cluster's restart after a night down, needs no override; lower it to catch younger rollbacks, "
        "at the price of `allowStale` after every longer stop. Default: `24h`."
    )
    allow_unsigned: NotRequired[str]
    (
        "Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica without a manifest or signed with "
        "another key (exits 40/41): the first rollout after upgrading to signed backups on disposable storage, a "
        "rotation of the backup key (`keyEpoch`) or of the identity. Inert on any other day; remove it afterwards. "
        "Default: none."
    )
    allow_stale: NotRequired[str]
    (
        "Override: a UTC date (YYYY-MM-DD) on which the restore accepts a manifest older than `maxAge` (exit 44), "
        "after checking the application was really stopped that long. Inert on any other day. Default: none."
    )
    key_epoch: NotRequired[int]
    (
        "The backup key is derived from the tailnet's Noise key and this number: the same on every site (set it in "
        "Pulumi.yaml, for all stacks); raise it to rotate the key (with `allowUnsigned` for that day). Default: "
        "`1`."
    )
    record_position: NotRequired[bool]
    (
        "Headscale's running pod records the position its signer last signed in the served witness (outside the "
        "export) through a `position-recorder` sidecar with its own ServiceAccount (get/patch on that one "
        "ConfigMap), and the restore refuses a replica signed below it (exit 44): a rollback younger than `maxAge` "
        "is caught too. Needs the API server reachable from the application's pods (`networkPolicy.apiServerCidrs` "
        "under default-deny egress). `false`: rollbacks are caught by `maxAge` alone. Default: `true`."
    )
    recorder_image: NotRequired[str]
    (
        "Image of the position recorder (a shell and curl: components/scripts/position-recorder.sh). Default: "
        "`docker.io/curlimages/curl:8.16.0`."
    )
    allow_rollback: NotRequired[str]
    (
        "Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica signed below the recorded "
        "position (exit 44), after a deliberate return to an older copy of the backup, or a served site whose "
        "witness holds no recorded position (exit 44: the position recorder never could write it). Inert on any "
        "other day; remove it afterwards. Default: none."
    )


class VolSync(TypedDict):
    """A second, independent backup: restic snapshots of the SQLite volumes."""

    repository: str
    """Secret (in the namespace) holding the restic repository config."""
    schedule: NotRequired[str]
    """Snapshot cron (five fields). Default: `0 */6 * * *`."""
    keep_daily: NotRequired[int]
    """Daily snapshots kept. Default: `7`."""
    keep_weekly: NotRequired[int]
    """Weekly snapshots kept. Default: `4`."""
    volume_snapshot_class: NotRequired[str]
    """VolumeSnapshotClass; default: the cluster's. Default: none."""


class Backup(TypedDict):
    """Where and how each SQLite database is backed up, restored and checked."""

    nfs: NotRequired[Nfs]
    """NFS target of the Litestream replicas; required in the sqlite and migrating stages. Default: none."""
    litestream: NotRequired[Litestream]
    """Litestream settings. Default: the defaults of each field."""
    local: NotRequired[LocalVolume]
    """Where each SQLite database lives locally. Default: the defaults of each field."""
    rehearsal: NotRequired[Rehearsal]
    """Scheduled restore rehearsals. Default: the defaults of each field."""
    auth: NotRequired[BackupAuth]
    """Authenticated backups (docs/security.md). Default: the defaults of each field."""
    volsync: NotRequired[VolSync]
    """Optional VolSync ReplicationSource per SQLite volume. Default: none."""


class Cluster(TypedDict):
    """The Kubernetes cluster this stack deploys to."""

    name: NotRequired[str]
    """Site name in `tailnet.sites`; default: the stack name. Default: none."""
    nodes: int
    """Schedulable worker nodes; caps every replica count that needs anti-affinity."""
    storage_class: NotRequired[str]
    """StorageClass for volumes; default: the cluster's default class. Default: none."""
    workloads_on_control_plane: NotRequired[bool]
    """Allow control-plane nodes (a single-node cluster has no other); default: workers only. Default: `false`."""
    exclude_nodes: NotRequired[list[str]]
    """Node names the control plane must never run on (e.g. a GPU worker). Default: empty."""
    toleration_seconds: NotRequired[int]
    """How long pods stay bound to a NotReady/unreachable node before eviction. Default: `60`."""
    api_server: NotRequired[ApiServer]
    """API server the tailnet kubeconfig reaches through the gateway. Default: none."""


class Derp(TypedDict):
    """The DERP relays clients use when a direct connection fails."""

    embedded: NotRequired[bool]
    """Run Headscale's embedded DERP relay (needs UDP 3478 reachable). Default: `false`."""
    region_id: NotRequired[int]
    """Region id of the embedded DERP. Default: `999`."""
    region_code: NotRequired[str]
    """Region code of the embedded DERP. Default: `headscale`."""
    urls: NotRequired[list[str]]
    (
        "DERP maps to load; empty with `embedded` for a private relay only. Default: "
        "`['https://controlplane.tailscale.com/derpmap/default']`."
    )


class Endpoint(TypedDict):
    """How the public hostname is routed, certified and failed over."""

    failover: NotRequired[FailoverMode]
    """`k8gb`, `externalDns` or `none`. Default: `none`."""
    ttl: NotRequired[int]
    """DNS TTL of the public record, seconds. Default: `60`."""
    route: NotRequired[RouteKind]
    """`gateway` (own Gateway + HTTPRoutes) or `ingress`. Default: `gateway`."""
    gateway_class: NotRequired[str]
    """GatewayClass of the public Gateway. Default: `cilium`."""
    ingress_class: NotRequired[str]
    """IngressClass when `route` is `ingress`. Default: `nginx`."""
    tls_issuer: NotRequired[str]
    """cert-manager issuer of the certificate. Default: `letsencrypt`."""
    tls_issuer_kind: NotRequired[str]
    """`ClusterIssuer` or `Issuer`. Default: `ClusterIssuer`."""


class Oidc(TypedDict):
    """OIDC login for Headscale (and Headplane through the same client), restricted to the accounts listed."""

    issuer: str
    """OIDC issuer URL."""
    client_id: str
    """OIDC client id; the secret is the `oidcClientSecret` key."""
    scope: NotRequired[list[str]]
    """Requested scopes. Default: `['openid', 'profile', 'email']`."""
    allowed_domains: NotRequired[list[str]]
    """Only e-mail domains listed may log in. Default: empty."""
    allowed_groups: NotRequired[list[str]]
    """Only members of these groups may log in. Default: empty."""
    allowed_users: NotRequired[list[str]]
    """Only these e-mail addresses may log in. Default: empty."""
    only_start_if_available: NotRequired[bool]
    """Refuse to start while the issuer is unreachable (off: start without OIDC login). Default: `false`."""
    pkce: NotRequired[bool]
    """Use PKCE (S256). Default: `true`."""
    allow_any_account: NotRequired[bool]
    (
        "Let every account of the identity provider log in and register nodes: OIDC without `allowedDomains`, "
        "`allowedUsers` or `allowedGroups` is refused unless this is true. Default: `false`."
    )
    headplane_api_key_login: NotRequired[bool]
    """Keep Headplane's API-key login next to OIDC (off: Headplane accepts OIDC logins only). Default: `false`."""


class Headscale(TypedDict):
    """The Headscale server: release, image, resources, storage, DERP, OIDC and overrides."""

    version: str
    """Headscale release, 0.28.x or 0.29.x; selects config keys and API dialect."""
    image: str
    """Headscale image; its tag must be the `version`."""
    log_level: NotRequired[str]
    """Log level. Default: `info`."""
    resources: NotRequired[ComputeResources]
    """Container resources. Default: the defaults of each field."""
    storage_size: NotRequired[str]
    (
        "Size of the SQLite volume (sqlite stage); at least 3 times recovery.headscaleDatabaseSize, since a restore "
        "holds the verified snapshot beside Litestream's output. Default: `1Gi`."
    )
    ephemeral_inactivity_timeout: NotRequired[str]
    """Ephemeral nodes offline this long are removed; more than 65s. Default: `30m`."""
    derp: NotRequired[Derp]
    """DERP relays. Default: the defaults of each field."""
    oidc: NotRequired[Oidc]
    """OIDC login; off when absent. Default: none."""
    replicas: NotRequired[int]
    """1 to serve, 0 to stop; Headscale is a strict singleton, never more than 1. Default: `1`."""
    allow_empty_start: NotRequired[str]
    (
        "Override after a real loss: a UTC date (YYYY-MM-DD) on which a site that has served (its ConfigMaps "
        "`headscale-served` / `headplane-served` exist) may start Headscale and Headplane empty when both the data "
        "volume and the NFS backup directory are gone. The restore refuses that case (exit 24) and prints today's "
        "date to set here; on any other day the value has no effect, so one left set is inert. Remove it once the "
        "pod has started. Default: none."
    )
    allow_downgrade_from: NotRequired[str]
    (
        "The one downgrade `pulumi up` lets through: from this deployed release to `version`, after restoring the "
        "pre-upgrade snapshot (docs/upgrades.md). Remove it afterwards. Default: none."
    )


class Prefixes(TypedDict):
    """The tailnet's address ranges, inside Tailscale's own, and how addresses are handed out."""

    v4: NotRequired[str]
    """Tailnet IPv4 range; must lie inside 100.64.0.0/10. Default: `100.64.0.0/10`."""
    v6: NotRequired[str]
    """Tailnet IPv6 range; inside fd7a:115c:a1e0::/48. Default: `fd7a:115c:a1e0::/48`."""
    allocation: NotRequired[str]
    """`sequential` or `random`. Default: `sequential`."""


class Proxy(TypedDict):
    """A TCP port on the gateway IP and where it forwards to."""

    name: str
    """Port name on the gateway Service."""
    port: int
    """Port on the gateway IP."""
    target_host: str
    """Where the proxy forwards to (a DNS name or an IP address)."""
    target_port: int
    """Target port."""
