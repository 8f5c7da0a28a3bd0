"""Every sentence of the availability report: templates with named placeholders, kept together per section.

A ``{name}`` placeholder is a word: its value comes from the config, through words.py (the words every section
shares) or the ``_words`` of the section's module. Which template applies is the section module's table
(claims.py, redundancy.py, scenarios.py, maintenance.py); the page around them is page.md.
Nothing here decides anything, so a wording is changed here alone (then `make docs` regenerates the pages).

A fragment with two wordings is an `Either`: the module that fills the word picks one by a fact; a fragment keyed by
a mode of the config is a dict over that mode's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, NamedTuple

from headscale_ha.components.settings import FailoverMode, PolicyMode, RouteKind


class Either(NamedTuple):
    """Two wordings of one fragment: ``yes`` where the fact holds, ``no`` (nothing, unless given) where it does not."""

    yes: str
    no: str = ""

    def pick(self, fact: bool) -> str:
        return self.yes if fact else self.no


class RowText(NamedTuple):
    """A row of the "What supplies redundancy" table."""

    component: str
    layout: str
    mechanism: str


class ScenarioText(NamedTuple):
    """The words of a failure scenario (its figures are the `recovery` output's)."""

    scenario: str
    keeps: str
    """What keeps working."""
    stops: str
    """What stops."""


#: What the report says it is (its `source`, and the page's note under the classification).
SOURCE = (
    "generated from the stack config by program/availability/; an interpretation of the configuration, "
    "not a health check"
)
#: How the applications of the `recovery` output are named in the report.
APP_NAMES = {"headscale": "Headscale", "headplane": "Headplane"}


class Common:
    """Fragments several sections share (words.py fills them)."""

    TUNNELS = "established WireGuard tunnels between peers that already know each other"
    CONTROL_STOPS = (
        "new registrations and logins, route approvals, ACL and DNS changes, key rotation and every netmap "
        "update (peers that move or restart cannot find each other again)"
    )
    #: What else stops with Headscale when it embeds a DERP region; yes: DERP maps are configured beside it.
    EMBEDDED_DERP_STOPS = Either(
        "; the embedded DERP region (clients fall back to the other regions of the DERP map)",
        "; the embedded DERP relay, the tailnet's only relay: peers without a direct path lose each other",
    )
    #: yes: workloads may run on the control plane.
    PLACEMENT = Either("any node, control plane included", "workers only")
    NEVER_ON = ", never on {nodes}"
    SITE = "`{name}`"
    NFS_CLAIM = "NFS claim of class `{storage_class}`"
    NFS_EXPORT = "NFS export `{server}:{path}`"
    THE_NFS = "the {nfs}"
    NO_NFS = "no NFS export"
    RETAINED_CLAIM = "a retained RWO claim ({storage_class})"
    CLAIM_CLASS = Either("class `{storage_class}`", "the default class")
    #: yes: an ephemeral storage class is set.
    EPHEMERAL_VOLUME = Either("a generic ephemeral volume of class `{storage_class}`", "an emptyDir")
    AND_HEADPLANE = " and Headplane"
    #: yes: the number is one.
    COUNT = Either("{number} {noun}", "{number} {noun}s")
    #: How a workload spread one replica per node is laid out (gateway.py renders both when replicas > 1).
    SPREAD = ", one per node (required anti-affinity), PodDisruptionBudget maxUnavailable 1"
    WAIT = " ({seconds})"


class Figures:
    """The figures of a failure scenario, as text."""

    SECONDS = "{seconds:g} s"
    UNTIL = "until {until}"
    OF_APP = "{app} {figure}"
    SEPARATOR = "; "
    NOT_MODELLED = "not modelled by the `recovery` output"
    ON_POSTGRES = "not modelled (PostgreSQL: CloudNativePG's failover, not a restore)"
    NO_FIGURE = "-"


class Classification:
    """One sentence: what the site's control plane is doing, then what its routes survive (joined by "; ")."""

    STANDBY = (
        "standby, not serving: {apps} run 0 replicas; this site serves only after a manual promotion "
        "(active site: {active_site})"
    )
    MIGRATING = (
        "paused for the migration to PostgreSQL: Headscale runs 0 replicas until the postgres stage "
        "(control updates stop, established tunnels keep working)"
    )
    STOPPED = "stopped: headscale.replicas is 0, nothing serves the tailnet's control plane"
    SQLITE = (
        "not continuously highly available: restart-and-restore singletons (one Headscale{processes} on its own "
        "SQLite database, restored from the Litestream replica before serving)"
    )
    #: yes: Headplane is deployed.
    PROCESSES = Either(" and one Headplane process, each", " process")
    POSTGRES = "not continuously highly available: Headscale is one restart-only process; {database}{headplane}"
    #: yes: more than one instance.
    DATABASE = Either(
        "its database is replicated ({instances} CloudNativePG instances, one per node: a replica is promoted "
        "when the primary fails)",
        "its database is a single CloudNativePG instance (no database failover)",
    )
    HEADPLANE_ON_SQLITE = Either("; Headplane stays a restart-and-restore singleton on SQLite")
    SINGLE_NODE = "the single node is the single point of failure of everything on the site"
    ROUTES_SURVIVE = "subnet routes survive the loss of {spare} ({routers} routers on {nodes} nodes, one per node)"
    #: yes: one router to spare.
    SPARE = Either("one node", "{count} nodes")
    ONE_ROUTER = "subnet routes hang on one router pod ({nodes} nodes)"


class Assumptions:
    """The list "Assumptions": what the interpretation takes for granted."""

    HEALTHY = "The declared replicas are healthy and spread as declared; one failure at a time."
    CLUSTER_SERVICES = (
        "The cluster's own services work: API server, scheduler, CNI, Cilium LB IPAM, the ingress data plane, "
        "cert-manager{operator}."
    )
    OPERATOR = Either(", the CloudNativePG operator")
    EXCLUDED_NODES = (
        "cluster.nodes ({nodes}) counts the nodes the control plane may use: cluster.excludeNodes ({excluded}) is "
        "taken as not among them."
    )
    FIGURES = (
        "Figures are the `recovery` output's: read from the rendered objects, measured (bench/measured), or stated "
        "in config."
    )


class Redundancy:
    """The table "What supplies redundancy": per component, the declared layout and the mechanism behind it."""

    HEADSCALE_LAYOUT = "{headscale_replicas}, Recreate, {placement}"
    HEADSCALE_ON_POSTGRES = RowText(
        "Headscale",
        HEADSCALE_LAYOUT,
        "{headscale_returns} pod connects to the CloudNativePG read-write service from any eligible node (no "
        "volume, no node pinning).",
    )
    HEADSCALE_ON_SQLITE = RowText(
        "Headscale",
        HEADSCALE_LAYOUT,
        "{headscale_returns} pod restores its SQLite database from the Litestream replica on {nfs_text} before it "
        "serves{on_any_node}",
    )
    #: yes: the active site.
    HEADSCALE_RETURNS = Either(
        "None besides a restart: no second server can take requests; a", "A promotion scales it up:"
    )
    #: yes: a single node.
    ON_ANY_NODE = Either(".", ", on any eligible node.")
    HEADPLANE = RowText(
        "Headplane",
        "{headplane_replicas}, Recreate, {placement}",
        "{headplane_returns} web UI is its own singleton with its own SQLite database and Litestream directory, "
        "restored before it serves.",
    )
    #: yes: the active site.
    HEADPLANE_RETURNS = Either("None besides a restart: the", "A promotion scales it up: the")
    NO_HEADPLANE = RowText("Headplane", "not deployed (headplane.enabled: false)", "-")
    RUNNING = "1 Deployment pod"
    STANDING_BY = "0 replicas (standby; 1 once promoted)"
    MIGRATING = "0 replicas (migrating)"
    SCALED_TO_ZERO = "0 replicas (headscale.replicas: 0)"
    SQLITE_DATABASES = RowText(
        "Databases",
        "{databases} ({litestream_list}), each on {local_volume} ({storage})",
        "Litestream ships each database's WAL every {sync_interval} to its own directory on the backup target; one "
        "copy serves, the replica is the only other copy.",
    )
    DATABASE = "separate SQLite database"
    MIGRATING_DATABASES = RowText(
        "Databases",
        "Headscale's SQLite frozen as the rollback point; a CloudNativePG cluster of {instances} instance(s) loaded "
        "by the migration Job",
        "The Litestream replica stays untouched until the postgres stage; the Job refuses to finish unless the copy "
        "verifies.",
    )
    POSTGRES_DATABASES = RowText(
        "Databases",
        "CloudNativePG cluster of {instances} instance(s){anti_affinity}{headplane_volume}",
        "{database_failover}; WAL archive and scheduled base backups go to the object store.{headplane_shipped}",
    )
    #: yes: more than one instance.
    ANTI_AFFINITY = Either(", required anti-affinity (one per node)")
    #: yes: more than one instance.
    DATABASE_FAILOVER = Either(
        "Streaming replicas; CloudNativePG promotes one when the primary fails",
        "No replica: the database waits for its instance to come back",
    )
    REPLICA_DATABASES = RowText(
        "Databases",
        "CloudNativePG replica cluster of {instances} instance(s), following {replica_source}{headplane_volume}",
        "Promotion turns the replica cluster into the primary; it archives nothing while it follows."
        "{headplane_shipped}",
    )
    #: yes: the replica cluster streams.
    REPLICA_SOURCE = Either("streaming from the active site, the archive as fallback", "the active site's WAL archive")
    HEADPLANE_VOLUME = Either("; Headplane's SQLite on {local_volume}")
    HEADPLANE_SHIPPED = Either(" Headplane's database is shipped by Litestream every {sync_interval}.")
    BACKUP_TARGET = RowText(
        "Backup target",
        "one {nfs}, mounted per application{shared}",
        "Every replacement pod restores the latest replica from it before serving; {rehearsal}.{volsync}",
    )
    #: yes: other sites.
    SHARED = Either(", shared with the other sites")
    #: yes: rehearsals are enabled.
    REHEARSAL = Either(
        "a restore rehearsal per application ({schedule}) proves it restores",
        "no restore rehearsal runs (backup.rehearsal.enabled: false)",
    )
    VOLSYNC = Either(" VolSync snapshots are a second copy.")
    OBJECT_STORE = RowText(
        "Object store",
        "`{store_path}`, retention {store_retention}",
        "The PostgreSQL WAL archive and base backups: point-in-time recovery{store_followed}",
    )
    #: yes: other sites.
    STORE_FOLLOWED = Either(" and the source the standby's replica cluster follows.", ".")
    ROUTERS = RowText(
        "Subnet routers",
        "{router_pods}",
        "Every router advertises the same routes; Headscale moves the primary route to a healthy router when one "
        "disappears.",
    )
    ONE_ROUTER = RowText(
        "Subnet routers",
        "{router_pods}",
        "No second router: the site's routes and LB pool are reachable through one pod.",
    )
    ROUTER_POD = "StatefulSet pod"
    GATEWAY_LAYOUT = "{gateway_pods}, behind one LoadBalancer IP `{gateway_ip}` (DNS, {proxies})"
    GATEWAY_SERVICES = RowText(
        "Gateway services (CoreDNS, socat)",
        GATEWAY_LAYOUT,
        "The Service spreads over the ready pods and its IP never changes.",
    )
    ONE_GATEWAY_POD = RowText(
        "Gateway services (CoreDNS, socat)",
        GATEWAY_LAYOUT,
        "No second pod: split DNS and the proxies stop while it is replaced.",
    )
    GATEWAY_POD = "Deployment pod"
    PUBLIC_ENDPOINT = RowText("Public endpoint", "`{public_hostname}` through the cluster's {route}", "{follows}")
    ROUTE: ClassVar[Mapping[RouteKind, str]] = {
        RouteKind.GATEWAY: "Gateway of class `{route_class}`",
        RouteKind.INGRESS: "Ingress of class `{route_class}`",
    }
    FOLLOWS: ClassVar[Mapping[FailoverMode, str]] = {
        FailoverMode.K8GB: "k8gb `Gslb` failover with `{active_site}` as primary, TTL {ttl} s: the name follows a "
        "promotion by itself.",
        FailoverMode.EXTERNAL_DNS: "external-dns record written by the active stack only, TTL {ttl} s: the name "
        "follows a promotion by itself.",
        FailoverMode.NONE: "None (endpoint.failover: none): after a promotion someone points the public record at "
        "the new site by hand.",
    }
    STANDBY_SITES = RowText(
        "Standby site",
        "{standbys} (standby)",
        "A manual promotion (the `failover` output's steps) restores the latest backup there; nothing fails over by "
        "itself.",
    )
    NO_STANDBY = RowText(
        "Standby site",
        "none (one site in tailnet.sites)",
        "No other site: losing this cluster means rebuilding it and restoring from the backups.",
    )
    THIS_STANDBY = RowText(
        "Standby site",
        "this site, standing by for `{active_site}`",
        "A manual promotion (the `failover` output's steps) scales this site's applications up; they restore the "
        "latest backup before serving. The stack refuses to deploy unless it follows its active's release, stage, "
        "identity and backup key.",
    )
    EMBEDDED_DERP = RowText(
        "DERP relays",
        "embedded in the Headscale pod{derp_maps}",
        "The embedded region shares Headscale's fate{other_relays}",
    )
    #: yes: DERP maps are configured.
    DERP_MAPS = Either(" and the DERP map(s) configured", " only")
    #: yes: DERP maps are configured.
    OTHER_RELAYS = Either("; the other regions are independent of this stack.", "; there is no other relay.")


class Scenarios:
    """The failure scenarios: what keeps working and what stops (the figures are the `recovery` output's)."""

    CRASH = ScenarioText("{crashes}", "The pod{with_volume}; {tunnels}.", "While it restarts: {control_stops}.")
    #: yes: Headplane is deployed.
    CRASHES = Either("A Headscale or Headplane container crashes", "The Headscale container crashes")
    #: yes: an application runs on SQLite.
    WITH_VOLUME = Either(", its volume with the local database, and its Litestream sidecar")
    ONLY_NODE = ScenarioText(
        "{the_node} (the site's only one)",
        "Other sites; {tunnels}.",
        "Everything on the site: Headscale, {headplane_listed}the subnet router, split DNS and the proxies. Nothing "
        "can be rescheduled; Headscale's absence stops {control_stops}.",
    )
    #: yes: the active site.
    THE_NODE = Either("The node", "Once promoted: the node")
    HEADPLANE_LISTED = Either("Headplane, ")
    HEADSCALE_NODE = ScenarioText(
        "{the_node} running Headscale{may_share}",
        "{tunnels_cap}; {routers_left}; the gateway pod(s) on other nodes.",
        "Until the replacement serves: {control_stops}. {replacement}",
    )
    MAY_SHARE = Either(" (Headplane may share it)")
    #: yes: more than one router.
    ROUTERS_LEFT = Either(
        "the subnet routers on the other nodes ({routers} in all, one per node), though if the lost node also held "
        "the primary router its routes move only once Headscale serves again",
        "the subnet router, unless it ran on the lost node",
    )
    RECONNECTS = "The replacement starts on another eligible node and reconnects to PostgreSQL."
    RESTORES = (
        "The replacement starts on another eligible node with an empty volume and restores from the replica on "
        "{nfs_text}; commits not yet shipped die with the node."
    )
    WAITS = (
        "The replacement waits until the claim is forced off the dead node{detach_wait} unless the node is tainted "
        "out-of-service; a node-local class never moves. Nothing is lost."
    )
    ROUTER_NODE = ScenarioText(
        "A node running only a subnet router or gateway pod",
        "{routes_keep}{gateway_keeps}",
        "{routes_stop}{gateway_stops}",
    )
    #: yes: more than one router.
    ROUTES_KEEP = Either(
        "Routes to the site: the other router(s) advertise the same prefixes and Headscale makes one of them "
        "primary; connections through the lost router are reset.",
        "Headscale and the tailnet elsewhere.",
    )
    #: yes: more than one gateway pod.
    GATEWAY_KEEPS = Either(" Split DNS and the proxies: the other gateway pod(s) answer behind the same IP.")
    #: yes: more than one router.
    ROUTES_STOP = Either(
        "Only the connections through the lost router; Headscale, while it runs, moves the primary route.",
        "Routes to the site's CIDRs and LB pool: a StatefulSet does not replace a pod of an unreachable node "
        "until that pod is deleted for good (node back, out-of-service taint, or a forced delete).",
    )
    #: yes: a single gateway pod.
    GATEWAY_STOPS = Either(
        " Split DNS and the proxies, if their only pod ran there, until it is replaced after eviction{detection}."
    )
    DETECTION = " (detection {seconds} per the `recovery` output)"
    POSTGRES_PRIMARY = ScenarioText(
        "The node of the PostgreSQL primary",
        "The replicas on the other nodes; Headscale reconnects through the read-write service once one is promoted.",
        "Database writes until CloudNativePG promotes a replica (its failover is not modelled by `recovery`).",
    )
    POSTGRES_INSTANCE = ScenarioText(
        "The node of the PostgreSQL instance",
        "{tunnels_cap}.",
        "Headscale, until the single instance and its volume are back (no replica to promote).",
    )
    OBJECT_STORE = ScenarioText(
        "The object store",
        "PostgreSQL and Headscale.",
        "WAL archiving and base backups (point-in-time recovery falls behind){archive_followers}",
    )
    #: yes: other sites.
    ARCHIVE_FOLLOWERS = Either("; a standby following the archive stops following.", ".")
    BACKUP_TARGET = ScenarioText(
        "The backup target ({nfs_text})",
        "{keep_serving}",
        "Replication (the replica falls behind), the restore rehearsals{snapshot}{no_promotion}",
    )
    #: yes: one application replicated.
    KEEP_SERVING = Either(
        "{names} keeps serving from the local database.", "{names} keep serving from the local databases."
    )
    #: yes: Headscale is replicated.
    SNAPSHOT = Either(", and the pre-upgrade snapshot (an upgrade started meanwhile stays down).", ".")
    NO_PROMOTION = Either(" A standby cannot be promoted meanwhile: this export is its only source.")
    POD_REPLACED = ScenarioText(
        "The backup target, then a pod replaced before it is back",
        "The applications whose pods were not replaced.",
        "{replaced_pod}",
    )
    #: yes: disposable storage.
    REPLACED_POD = Either(
        "A replaced {names} pod finds nothing to restore from and refuses to start; the writes since the export "
        "was lost are gone with the old pod.",
        "A replaced pod serves the database its claim holds; nothing new reaches the replica.",
    )
    CLUSTER_WITHOUT_STANDBY = ScenarioText(
        "The whole cluster",
        "{tunnels_cap}.",
        "The whole control plane until the cluster is rebuilt and restored from {backups}: there is no standby site.",
    )
    BACKUPS = "the backups"
    CLUSTER = ScenarioText(
        "{whole_site}",
        "{tunnels_cap}; the other sites' routers and gateways.",
        "The control plane until an operator promotes {promoted}, which {promotion_restores}; {dns}.{estimated}",
    )
    #: yes: the active site.
    WHOLE_SITE = Either("The whole cluster", "The whole active site (cluster)")
    THIS_SITE = "this site"
    #: yes: Headscale on SQLite.
    PROMOTION_RESTORES = Either(
        "restores the latest replica from {nfs_text}", "promotes its CloudNativePG replica cluster"
    )
    DNS: ClassVar[Mapping[FailoverMode, str]] = {
        FailoverMode.K8GB: "k8gb moves the public name",
        FailoverMode.EXTERNAL_DNS: "the promoted stack publishes the public record",
        FailoverMode.NONE: "someone moves the public record by hand (failover none; the figure counts only its TTL)",
    }
    #: yes: the active site.
    ESTIMATED = Either(" Figures estimated with this stack's inputs; the standby's own report has its own.")
    OIDC_REQUIRED = ScenarioText(
        "The OIDC provider{during_promotion}",
        "A running Headscale and every registered node; pre-auth key registration.",
        "OIDC logins; and, with onlyStartIfAvailable, every Headscale start (crash, node loss, upgrade, promotion) "
        "waits until the issuer answers: the recovery times above hold only while it is reachable.",
    )
    OIDC_OPTIONAL = ScenarioText(
        "The OIDC provider{during_promotion}",
        "Headscale (it starts without OIDC login when the issuer is down) and every registered node; pre-auth keys.",
        "OIDC logins to Headscale{and_headplane} until the issuer is back.",
    )
    DURING_PROMOTION = Either(" (during a promotion)")
    SECOND_FAILURE = ScenarioText(
        "A second failure before the first is repaired",
        "Whatever neither failure touches.",
        "Outside what this report covers: check the remaining copies, nodes and endpoints before further maintenance.",
    )
    THIS_SITE_LOST = ScenarioText(
        "This site{extent}",
        "The active site `{active_site}` and the whole control plane.",
        "The fallback: until this site is back, a loss of the active site has no site to promote; this site's "
        "subnet routes and split DNS stop.",
    )
    #: yes: a single node.
    EXTENT = Either(" (its only node)", " (the whole cluster)")
    STANDBY_BACKUP_TARGET = ScenarioText(
        "The backup target ({nfs_text})",
        "The active site (it keeps serving from its local copies).",
        "This site's promotion: the replica on the export is what it would restore.",
    )
    REPLICA_OBJECT_STORE = ScenarioText(
        "The object store",
        "The active site; this replica cluster keeps what it has replayed{still_streaming}",
        "Following the active site through {following}: a promotion then starts from an older state.",
    )
    #: yes: the replica cluster streams.
    STILL_STREAMING = Either(" and keeps streaming.", ".")
    #: yes: the replica cluster streams.
    FOLLOWING = Either("streaming, then from the archive", "the archive")
    MIGRATION_JOB = ScenarioText(
        "The migration Job fails",
        "{tunnels_cap}; the SQLite database and its replica, untouched.",
        "Nothing new: Headscale is already at 0 until the stage moves on (or back to sqlite).",
    )


class Maintenance:
    """The table "Upgrades and voluntary maintenance": what each activity costs."""

    UPGRADE = "Upgrading Headscale (headscale.version and image)"
    UPGRADE_STANDBY = (
        "Nothing runs here, so nothing stops. The stack refuses a release that differs from its active's: "
        "upgrade `{active_site}` first, then this site."
    )
    RECREATE = "Recreate stops the old pod before the new one starts: {outage}."
    UPGRADE_POSTGRES = (
        RECREATE + " There is no pre-upgrade snapshot on PostgreSQL: take a CloudNativePG backup first. The version "
        "gate refuses a downgrade."
    )
    UPGRADE_SQLITE = (
        RECREATE + " The `pre-upgrade` init container snapshots the database to the backup directory before the new "
        "release migrates it; the version gate refuses a downgrade. Standbys follow afterwards."
    )
    #: yes: the `recovery` output models it.
    OUTAGE = Either("an outage of about {rto} (`recovery` podReplaced), nothing lost", "an outage (not modelled)")
    CONFIG = "Changing Headscale's config or the tailnet policy"
    CONFIG_ROLLS = "A change to its config rolls the pod: {outage}. {policy}"
    POLICY: ClassVar[Mapping[PolicyMode, str]] = {
        PolicyMode.FILE: "In `file` policy mode a policy change restarts Headscale too.",
        PolicyMode.APPLY: "Policy changes (`apply` mode) are written over the API without a restart.",
        PolicyMode.DATABASE_UNMANAGED: "Policy changes (`databaseUnmanaged`) go over the API without a restart.",
    }
    HEADPLANE = "Upgrading or changing Headplane"
    HEADPLANE_RECREATE = (
        "Recreate: the web UI is away for {headplane_outage}; Headscale and the tailnet are unaffected."
    )
    #: yes: the `recovery` output models it.
    HEADPLANE_OUTAGE = Either("about {rto}", "an outage")
    DRAIN = "Draining a node"
    DRAIN_ONLY_NODE = "Draining the only node stops everything on the site until it is back{fallback}"
    #: yes: the active site.
    FALLBACK = Either(".", "; as a standby it serves nothing, so only the fallback is away.")
    DRAIN_SINGLETONS = (
        "Headscale{and_headplane_running} have no PodDisruptionBudget (one replica cannot have a budget that lets a "
        "drain pass): a drain of their node costs {outage}."
    )
    DRAIN_ROUTERS = (
        "Subnet routers: PodDisruptionBudget maxUnavailable 1, drain one node at a time and the routes stay."
    )
    DRAIN_ONE_ROUTER = "Subnet router: no PodDisruptionBudget; routes pause while its pod moves."
    DRAIN_GATEWAY = "Gateway services: PodDisruptionBudget maxUnavailable 1, DNS and proxies stay."
    DRAIN_ONE_GATEWAY_POD = "Gateway services: no PodDisruptionBudget; DNS and proxies pause while the pod moves."
    CLOUDNATIVEPG = "CloudNativePG (its own budgets, `enablePDB` not rendered so on by default): "
    DRAIN_SWITCHES_OVER = CLOUDNATIVEPG + "it switches the primary over before the node drains."
    DRAIN_BLOCKED = (
        CLOUDNATIVEPG + "a single instance's budget blocks the drain of its node until it is handled by hand."
    )
    SWITCH = "Planned switch to another site"
    SWITCH_STEPS = (
        "Fence first (scale the old active to 0{tail}), then promote; the control plane is away from the fencing "
        "until the promoted pods serve; {dns}. The `failover` output lists the steps."
    )
    #: yes: Headscale on SQLite.
    TAIL = Either(": its Litestream sidecar ships the tail, nothing is lost")
    #: yes: endpoint.failover is not none.
    DNS = Either("DNS follows by itself", "move the public record by hand")


class Limits:
    """The list "What prevents a stronger claim"."""

    SINGLE_WRITER = (
        "Single writer: Headscale is one process (headscale.replicas is at most 1; upstream supports no second "
        "instance, even on one PostgreSQL), so every restart, upgrade and node loss is a control-plane outage."
    )
    SECOND_SINGLETON = (
        "Headplane is a second singleton with its own database: restoring the whole control plane needs both "
        "backup directories."
    )
    UNREPLICATED_TAIL = (
        "Unreplicated tail: on disposable storage a node loss loses up to {node_loss_rpo} of commits (`recovery` "
        "nodeLoss; backup.litestream.syncInterval {sync_interval} plus Litestream's monitor tick)."
    )
    NO_FENCING = (
        "No fencing: disposable storage does not stop a partitioned node's pod, which may keep replicating to "
        "the export while its replacement restores; power the node off or taint it out-of-service before "
        "trusting the replacement."
    )
    PINNED = (
        "Persistent storage pins the database to its claim: a node loss waits for the force detach{detach_wait}, "
        "and a node-local class never moves."
    )
    SHARED_TARGET = (
        "{nfs_cap} is a shared dependency: it holds the only replica of the {litestream_names}{databases}"
        "{restore_source}; while it is down a replaced pod {replaced_pod}"
    )
    #: yes: one application replicated.
    DATABASES = Either(" database", " databases")
    #: yes: other sites restore Headscale from it.
    RESTORE_SOURCE = Either(", the standby's only restore source")
    #: yes: disposable storage.
    REPLACED_POD = Either("cannot start.", "serves a copy that is no longer backed up.")
    SINGLE_NODE = (
        "Single node: the node is the single point of failure of the site; nothing can be rescheduled, and "
        "draining it stops everything."
    )
    MANUAL_PROMOTION = (
        "Manual promotion: a site loss lasts until an operator decides to run `make promote`{stated}; nothing fails "
        "over by itself."
    )
    STATED_PROMOTION = " (stated {seconds} in `recovery.promotionSeconds`)"
    NO_STANDBY = "No standby site: losing the cluster means rebuilding it."
    NO_DNS_FAILOVER = "No DNS failover (endpoint.failover: none): the public record is moved by hand after a promotion."
    SINGLE_INSTANCE = "Single PostgreSQL instance: the database has no replica to promote."
    UPSTREAM_POSTGRES = (
        "Headscale's upstream develops and tests against SQLite and keeps PostgreSQL for existing users; the "
        "postgres stage relies on that support."
    )
    ONE_ROUTER = (
        "One subnet router: the site's routes hang on one pod, which a StatefulSet does not replace while its node "
        "is unreachable."
    )
    OIDC_START = (
        "The OIDC provider is a start dependency (onlyStartIfAvailable): no Headscale start succeeds while it is down."
    )
    NO_REHEARSAL = "No restore rehearsal: nothing proves the replica restores until a restore is needed."
    STATED_INPUTS = (
        "The recovery times rest on stated inputs (image pull, start time, promotion time in `recovery`), not on a "
        "failure drill."
    )


class Improvements:
    """The list "What would improve it", from this configuration's own knobs."""

    DNS_FAILOVER = "Set endpoint.failover to `k8gb` or `externalDns`, so the public name follows a promotion."
    ADD_NODES = "Add nodes: with one node nothing can be rescheduled, and nothing below can be spread."
    MORE_ROUTERS = "Raise gateway.routers.replicas to 2 or more (at most {nodes}) for route failover."
    MORE_GATEWAY_PODS = (
        "Raise gateway.services.replicas to 2 or more (at most {nodes}) so DNS and the proxies survive a node."
    )
    POSTGRES_STAGE = (
        "Move to the postgres stage with more than one CloudNativePG instance (database.postgres.instances is "
        "{instances}, at most {nodes}): database failover instead of restore-on-start. Headscale stays one process."
    )
    MORE_INSTANCES = "Raise database.postgres.instances (at most {nodes}) to get a replica to promote."
    SHORTER_SYNC = (
        "Shorten backup.litestream.syncInterval to shrink the node-loss tail, or use persistent storage to lose "
        "nothing at the cost of the force-detach wait."
    )
    SECOND_COPY = (
        "Keep a second, independent copy of the backup export (off the storage it lives on), and protect the "
        "tailnet identity keys with it."
    )
    REHEARSALS = "Turn the restore rehearsals back on (backup.rehearsal.enabled)."
    OIDC_LENIENT = (
        "Consider headscale.oidc.onlyStartIfAvailable: false, so an identity-provider outage does not block a restart."
    )
    FENCING = "Write down (or automate) the fencing of a partitioned node before a replacement is trusted."
    REHEARSE_PROMOTION = (
        "Rehearse the promotion in both directions (`make promote`) and state your on-call's time to decide in "
        "recovery.promotionSeconds."
    )
    MEASURE = (
        "Measure image pull and start time on the cluster and state them in `recovery`; continuous availability "
        "would need a Headscale that supports more than one active instance, which upstream does not."
    )


class Page:
    """The bits of the page (page.md) that depend on the report."""

    NOT_SERVING = ", not serving"
    RECOVERY_ROW = "`{row}`"
    NO_RECOVERY_ROW = "-"
