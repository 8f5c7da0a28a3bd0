"""The availability report of a stack: what its configuration can and cannot keep running, in words and tables.

Published as docs/availability/<stack>.md (`make docs`), and in short (the classification and the figures) as the
`availability` stack output, so the claim an operator reads is derived from the same config as the objects the stack
deploys, never typed by hand. Every
figure of time or data loss is read from the `recovery` output (program/recovery.py), which traces each of its
numbers to the rendered pods, the committed measurement or a stated input; this module adds none of its own.

It is an interpretation of the configuration, not a health check: it assumes the declared replicas are healthy,
spread as declared, and that the cluster's own services work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headscale_ha.components.settings import DatabaseStage, FailoverMode, LocalStorage, PolicyMode, Role, RouteKind
from headscale_ha.program.args import gateway_proxies, headplane_replicas, headscale_replicas
from headscale_ha.program.config import StackConfig

SOURCE = (
    "generated from the stack config by program/availability.py; an interpretation of the configuration, "
    "not a health check"
)
#: How the applications of the `recovery` output are named in the report.
APP_NAMES = {"headscale": "Headscale", "headplane": "Headplane"}
REGENERATE = "`make docs` (`python -m tools.availability_docs --write`)"
#: The layout of a workload spread one replica per node (gateway.py renders both when replicas > 1).
SPREAD = ", one per node (required anti-affinity), PodDisruptionBudget maxUnavailable 1"


def _names(apps: Iterable[str], sep: str = " and ") -> str:
    return sep.join(APP_NAMES[app] for app in apps)


def _sites(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------------------------- recovery figures


def _seconds(value: float) -> str:
    return f"{value:g} s"


def recovery_rows(recovery: dict[str, Any], failure: str) -> dict[str, dict[str, Any]]:
    """The `recovery` rows of ``failure``, per modelled application (absent: not modelled, or no such row)."""
    rows: dict[str, dict[str, Any]] = {}
    for app, model in recovery.get("applications", {}).items():
        if not model.get("modelled"):
            continue
        row = next((r for r in model["failures"] if r["failure"] == failure), None)
        if row is not None:
            rows[app] = row
    return rows


def _rto(row: dict[str, Any]) -> str:
    return f"until {row['until']}" if row["rtoSeconds"] is None else _seconds(row["rtoSeconds"])


def _rpo(row: dict[str, Any]) -> str:
    return str(row["rpoLost"]) if row["rpoSeconds"] is None else _seconds(row["rpoSeconds"])


def _unmodelled(recovery: dict[str, Any], apps: Iterable[str]) -> list[str]:
    """Applications the `recovery` output covers but does not model (Headscale on PostgreSQL)."""
    models = recovery.get("applications", {})
    return [app for app in apps if app in models and not models[app].get("modelled")]


def _figures(recovery: dict[str, Any], failure: str | None, apps: Iterable[str]) -> dict[str, Any]:
    """The figures of one scenario, copied from the `recovery` rows of ``failure`` for ``apps``, as text too."""
    apps = [app for app in apps if app in APP_NAMES]
    if failure is None:
        return {"recovery": None, "figures": {}, "rto": "not modelled by the `recovery` output", "rpo": "-"}
    rows = {app: row for app, row in recovery_rows(recovery, failure).items() if app in apps}
    figures = {
        app: {key: row[key] for key in ("rtoSeconds", "until", "rpoSeconds", "rpoLost")} for app, row in rows.items()
    }
    rto = [f"{APP_NAMES[app]} {_rto(row)}" for app, row in rows.items()]
    rpo = [f"{APP_NAMES[app]} {_rpo(row)}" for app, row in rows.items()]
    for app in _unmodelled(recovery, apps):
        why = "not modelled (PostgreSQL: CloudNativePG's failover, not a restore)"
        rto.append(f"{APP_NAMES[app]} {why}")
        rpo.append(f"{APP_NAMES[app]} {why}")
    return {
        "recovery": failure,
        "figures": figures,
        "rto": "; ".join(rto) or "not modelled by the `recovery` output",
        "rpo": "; ".join(rpo) or "-",
    }


def _step(recovery: dict[str, Any], failure: str, step: str) -> float | None:
    """One step of a `recovery` row (the first modelled application's), e.g. nodeLoss's detection."""
    for row in recovery_rows(recovery, failure).values():
        if step in row["steps"]:
            return float(row["steps"][step])
    return None


# --------------------------------------------------------------------------------------------- facts of the config


class _Facts:
    """What the report's sentences are made of, read once from the config."""

    def __init__(self, config: StackConfig, recovery: dict[str, Any]) -> None:
        self.config = config
        self.recovery = recovery
        self.active = config.role is Role.ACTIVE
        self.stage = config.database.stage
        self.nodes = config.cluster.nodes
        self.single_node = self.nodes == 1
        self.storage = config.backup.local.storage
        self.disposable = self.storage is LocalStorage.DISPOSABLE
        self.headscale_runs = headscale_replicas(config) == 1
        self.headplane = config.headplane.enabled
        self.headplane_runs = self.headplane and headplane_replicas(config) == 1
        self.routers = config.gateway.routers.replicas
        self.services = config.gateway.services.replicas
        self.instances = config.database.postgres.instances
        self.failover = config.endpoint.failover
        self.site = config.site.name
        self.active_site = config.tailnet.active_site
        self.others = [site.name for site in config.tailnet.sites if site.name != self.site]
        self.standbys = [site.name for site in config.tailnet.sites if site.name != self.active_site]
        self.oidc = config.headscale.oidc
        self.nfs = config.backup.nfs
        #: Applications whose SQLite database is replicated by Litestream to the NFS export.
        self.litestream_apps = [
            app
            for app, uses in (
                ("headscale", self.stage is not DatabaseStage.POSTGRES),
                ("headplane", self.headplane),
            )
            if uses
        ]
        self.apps = ["headscale", *(["headplane"] if self.headplane else [])]

    @property
    def nfs_text(self) -> str:
        if self.nfs is None:
            return "no NFS export"
        if self.nfs.storage_class is not None:
            return f"the NFS claim of class `{self.nfs.storage_class}`"
        return f"the NFS export `{self.nfs.server}:{self.nfs.path}`"

    @property
    def placement(self) -> str:
        """Where the control plane's pods may run."""
        where = "any node, control plane included" if self.config.cluster.workloads_on_control_plane else "workers only"
        if self.config.cluster.exclude_nodes:
            where += ", never on " + ", ".join(f"`{n}`" for n in sorted(self.config.cluster.exclude_nodes))
        return where

    @property
    def local_volume(self) -> str:
        if not self.disposable:
            cls = self.config.cluster.storage_class
            return f"a retained RWO claim ({f'class `{cls}`' if cls else 'the default class'})"
        eph = self.config.backup.local.ephemeral_storage_class
        return f"a generic ephemeral volume of class `{eph}`" if eph else "an emptyDir"

    def control_stops(self) -> str:
        """What stops while Headscale is down; established tunnels are not in it."""
        text = (
            "new registrations and logins, route approvals, ACL and DNS changes, key rotation and every netmap "
            "update (peers that move or restart cannot find each other again)"
        )
        derp = self.config.headscale.derp
        if derp.embedded and not derp.urls:
            text += "; the embedded DERP relay, the tailnet's only relay: peers without a direct path lose each other"
        elif derp.embedded:
            text += "; the embedded DERP region (clients fall back to the other regions of the DERP map)"
        return text

    @property
    def tunnels(self) -> str:
        return "established WireGuard tunnels between peers that already know each other"


# --------------------------------------------------------------------------------------------- classification


def classification(config: StackConfig, facts: _Facts | None = None) -> str:
    """One sentence: which kind of availability the configuration gives, in words derived from it."""
    f = facts or _Facts(config, {})
    parts: list[str] = []
    if not f.active:
        parts.append(
            "standby, not serving: Headscale"
            + (" and Headplane" if f.headplane else "")
            + f" run 0 replicas; this site serves only after a manual promotion (active site: {f.active_site})"
        )
    elif f.stage is DatabaseStage.MIGRATING:
        parts.append(
            "paused for the migration to PostgreSQL: Headscale runs 0 replicas until the postgres stage "
            "(control updates stop, established tunnels keep working)"
        )
    elif not f.headscale_runs:
        parts.append("stopped: headscale.replicas is 0, nothing serves the tailnet's control plane")
    elif f.stage is DatabaseStage.SQLITE:
        parts.append(
            "not continuously highly available: restart-and-restore singletons (one Headscale"
            + (" and one Headplane process, each" if f.headplane else " process")
            + " on its own SQLite database, restored from the Litestream replica before serving)"
        )
    else:
        database = (
            f"its database is replicated ({f.instances} CloudNativePG instances, one per node: a replica is promoted "
            "when the primary fails)"
            if f.instances > 1
            else "its database is a single CloudNativePG instance (no database failover)"
        )
        parts.append(f"not continuously highly available: Headscale is one restart-only process; {database}")
        if f.headplane:
            parts.append("Headplane stays a restart-and-restore singleton on SQLite")
    if f.single_node:
        parts.append("the single node is the single point of failure of everything on the site")
    elif f.routers > 1:
        survives = f.routers - 1
        parts.append(
            f"subnet routes survive the loss of {'one node' if survives == 1 else f'{survives} nodes'} "
            f"({f.routers} routers on {f.nodes} nodes, one per node)"
        )
    else:
        parts.append(f"subnet routes hang on one router pod ({f.nodes} nodes)")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------- redundancy


def _row(component: str, layout: str, mechanism: str) -> dict[str, str]:
    return {"component": component, "layout": layout, "mechanism": mechanism}


def _replicas(f: _Facts, runs: bool) -> str:
    """A singleton Deployment's declared replicas, and why there are none."""
    if runs:
        return "1 Deployment pod"
    if not f.active:
        return "0 replicas (standby; 1 once promoted)"
    return "0 replicas (migrating)" if f.stage is DatabaseStage.MIGRATING else "0 replicas (headscale.replicas: 0)"


def redundancy(f: _Facts) -> list[dict[str, str]]:
    """What supplies redundancy, component by component: the declared layout and the mechanism behind it."""
    config = f.config
    rows = []
    first = "None besides a restart: no second server can take requests; a" if f.active else "A promotion scales it up:"
    if f.stage is DatabaseStage.POSTGRES:
        mechanism = (
            f"{first} pod connects to the CloudNativePG read-write service from any eligible node (no volume, no "
            "node pinning)."
        )
    else:
        mechanism = (
            f"{first} pod restores its SQLite database from the Litestream replica on {f.nfs_text} before it serves"
            + ("." if f.single_node else ", on any eligible node.")
        )
    rows.append(_row("Headscale", f"{_replicas(f, f.headscale_runs)}, Recreate, {f.placement}", mechanism))
    if f.headplane:
        rows.append(
            _row(
                "Headplane",
                f"{_replicas(f, f.headplane_runs)}, Recreate, {f.placement}",
                ("None besides a restart: the" if f.active else "A promotion scales it up: the")
                + " web UI is its own singleton with its own SQLite database and Litestream directory, restored "
                "before it serves.",
            )
        )
    else:
        rows.append(_row("Headplane", "not deployed (headplane.enabled: false)", "-"))
    sync = config.backup.litestream.sync_interval
    if f.stage is DatabaseStage.SQLITE:
        rows.append(
            _row(
                "Databases",
                f"{_count(len(f.litestream_apps), 'separate SQLite database')} "
                f"({_names(f.litestream_apps, ', ')}), each on {f.local_volume} ({f.storage.value})",
                f"Litestream ships each database's WAL every {sync} to its own directory on the backup target; one "
                "copy serves, the replica is the only other copy.",
            )
        )
    elif f.stage is DatabaseStage.MIGRATING:
        rows.append(
            _row(
                "Databases",
                f"Headscale's SQLite frozen as the rollback point; a CloudNativePG cluster of {f.instances} "
                "instance(s) loaded by the migration Job",
                "The Litestream replica stays untouched until the postgres stage; the Job refuses to finish unless the "
                "copy verifies.",
            )
        )
    else:
        postgres = config.database.postgres
        if f.active:
            layout = f"CloudNativePG cluster of {f.instances} instance(s)" + (
                ", required anti-affinity (one per node)" if f.instances > 1 else ""
            )
            mechanism = (
                "Streaming replicas; CloudNativePG promotes one when the primary fails"
                if f.instances > 1
                else "No replica: the database waits for its instance to come back"
            ) + "; WAL archive and scheduled base backups go to the object store."
        else:
            source = (
                "streaming from the active site, the archive as fallback"
                if postgres.streaming_host
                else "the active site's WAL archive"
            )
            layout = f"CloudNativePG replica cluster of {f.instances} instance(s), following {source}"
            mechanism = "Promotion turns the replica cluster into the primary; it archives nothing while it follows."
        if f.headplane:
            layout += f"; Headplane's SQLite on {f.local_volume}"
            mechanism += f" Headplane's database is shipped by Litestream every {sync}."
        rows.append(_row("Databases", layout, mechanism))
    if f.nfs is not None and f.litestream_apps:
        rehearsal = config.backup.rehearsal
        check = (
            f"a restore rehearsal per application ({rehearsal.schedule}) proves it restores"
            if rehearsal.enabled
            else "no restore rehearsal runs (backup.rehearsal.enabled: false)"
        )
        volsync = " VolSync snapshots are a second copy." if config.backup.volsync is not None else ""
        rows.append(
            _row(
                "Backup target",
                f"one {f.nfs_text.removeprefix('the ')}, mounted per application"
                + (", shared with the other sites" if f.others else ""),
                f"Every replacement pod restores the latest replica from it before serving; {check}.{volsync}",
            )
        )
    if f.stage is not DatabaseStage.SQLITE and config.database.postgres.object_store is not None:
        store = config.database.postgres.object_store
        rows.append(
            _row(
                "Object store",
                f"`{store.destination_path}`, retention {store.retention}",
                "The PostgreSQL WAL archive and base backups: point-in-time recovery"
                + (" and the source the standby's replica cluster follows." if f.others else "."),
            )
        )
    rows.append(
        _row(
            "Subnet routers",
            _count(f.routers, "StatefulSet pod") + (SPREAD if f.routers > 1 else ""),
            "Every router advertises the same routes; Headscale moves the primary route to a healthy router when "
            "one disappears."
            if f.routers > 1
            else "No second router: the site's routes and LB pool are reachable through one pod.",
        )
    )
    proxies = ", ".join(p.name for p in gateway_proxies(config))
    rows.append(
        _row(
            "Gateway services (CoreDNS, socat)",
            _count(f.services, "Deployment pod")
            + (SPREAD if f.services > 1 else "")
            + f", behind one LoadBalancer IP `{config.site.gateway_ip}` (DNS, {proxies})",
            "The Service spreads over the ready pods and its IP never changes."
            if f.services > 1
            else "No second pod: split DNS and the proxies stop while it is replaced.",
        )
    )
    route = (
        f"Gateway of class `{config.endpoint.gateway_class}`"
        if config.endpoint.route is RouteKind.GATEWAY
        else f"Ingress of class `{config.endpoint.ingress_class}`"
    )
    ttl = config.endpoint.ttl
    endpoint_mechanism = {
        FailoverMode.K8GB: f"k8gb `Gslb` failover with `{f.active_site}` as primary, TTL {ttl} s: the name follows "
        "a promotion by itself.",
        FailoverMode.EXTERNAL_DNS: f"external-dns record written by the active stack only, TTL {ttl} s: the name "
        "follows a promotion by itself.",
        FailoverMode.NONE: "None (endpoint.failover: none): after a promotion someone points the public record at "
        "the new site by hand.",
    }[f.failover]
    rows.append(
        _row(
            "Public endpoint",
            f"`{config.tailnet.public_hostname}` through the cluster's {route}",
            endpoint_mechanism,
        )
    )
    if f.active:
        layout = _sites(f.standbys) + " (standby)" if f.standbys else "none (one site in tailnet.sites)"
        mechanism = (
            "A manual promotion (the `failover` output's steps) restores the latest backup there; nothing fails over "
            "by itself."
            if f.standbys
            else "No other site: losing this cluster means rebuilding it and restoring from the backups."
        )
    else:
        layout = f"this site, standing by for `{f.active_site}`"
        mechanism = (
            "A manual promotion (the `failover` output's steps) scales this site's applications up; they restore the "
            "latest backup before serving. The stack refuses to deploy unless it follows its active's release, stage, "
            "identity and backup key."
        )
    rows.append(_row("Standby site", layout, mechanism))
    derp = config.headscale.derp
    if derp.embedded:
        rows.append(
            _row(
                "DERP relays",
                "embedded in the Headscale pod" + (" and the DERP map(s) configured" if derp.urls else " only"),
                "The embedded region shares Headscale's fate"
                + ("; the other regions are independent of this stack." if derp.urls else "; there is no other relay."),
            )
        )
    return rows


# --------------------------------------------------------------------------------------------- failure scenarios


def _scenario(
    scenario: str, keeps: str, stops: str, recovery: dict[str, Any], failure: str | None, apps: Iterable[str]
) -> dict[str, Any]:
    return {"scenario": scenario, "whatKeepsWorking": keeps, "whatStops": stops, **_figures(recovery, failure, apps)}


def _node_loss(f: _Facts) -> dict[str, Any]:
    recovery = f.recovery
    if f.single_node:
        return _scenario(
            "The node (the site's only one)",
            f"Other sites; {f.tunnels}.",
            "Everything on the site: Headscale, "
            + ("Headplane, " if f.headplane else "")
            + "the subnet router, split DNS and the proxies. Nothing can be rescheduled; Headscale's absence stops "
            + f.control_stops()
            + ".",
            recovery,
            "nodeLoss",
            f.apps,
        )
    if f.stage is DatabaseStage.POSTGRES:
        how = "The replacement starts on another eligible node and reconnects to PostgreSQL."
    elif f.disposable:
        how = (
            "The replacement starts on another eligible node with an empty volume and restores from the replica on "
            f"{f.nfs_text}; commits not yet shipped die with the node."
        )
    else:
        detach = recovery.get("inputs", {}).get("facts", {}).get("forceDetachSeconds")
        wait = f" ({_seconds(detach)})" if detach is not None else ""
        how = (
            "The replacement waits until the claim is forced off the dead node"
            + wait
            + " unless the node is tainted out-of-service; a node-local class never moves. Nothing is lost."
        )
    routers = (
        f"the subnet routers on the other nodes ({f.routers} in all, one per node), though if the lost node also "
        "held the primary router its routes move only once Headscale serves again"
        if f.routers > 1
        else "the subnet router, unless it ran on the lost node"
    )
    return _scenario(
        "The node running Headscale" + (" (Headplane may share it)" if f.headplane else ""),
        f"{_cap(f.tunnels)}; {routers}; the gateway pod(s) on other nodes.",
        f"Until the replacement serves: {f.control_stops()}. " + how,
        recovery,
        "nodeLoss",
        f.apps,
    )


def _router_node_loss(f: _Facts) -> dict[str, Any]:
    detection = _step(f.recovery, "nodeLoss", "detection")
    after = f" (detection {_seconds(detection)} per the `recovery` output)" if detection is not None else ""
    if f.routers > 1:
        keeps = (
            "Routes to the site: the other router(s) advertise the same prefixes and Headscale makes one of them "
            "primary; connections through the lost router are reset."
        )
        stops = "Only the connections through the lost router; Headscale, while it runs, moves the primary route."
    else:
        keeps = "Headscale and the tailnet elsewhere."
        stops = (
            "Routes to the site's CIDRs and LB pool: a StatefulSet does not replace a pod of an unreachable node "
            "until that pod is deleted for good (node back, out-of-service taint, or a forced delete)."
        )
    if f.services > 1:
        keeps += " Split DNS and the proxies: the other gateway pod(s) answer behind the same IP."
    else:
        stops += f" Split DNS and the proxies, if their only pod ran there, until it is replaced after eviction{after}."
    return _scenario("A node running only a subnet router or gateway pod", keeps, stops, f.recovery, None, [])


def _nfs_loss(f: _Facts) -> list[dict[str, Any]]:
    apps = f.litestream_apps
    names = _names(apps)
    promote = ""
    if f.others and "headscale" in apps:
        promote = " A standby cannot be promoted meanwhile: this export is its only source."
    first = _scenario(
        f"The backup target ({f.nfs_text})",
        f"{names} {'keeps' if len(apps) == 1 else 'keep'} serving from the local database"
        + ("." if len(apps) == 1 else "s."),
        "Replication (the replica falls behind), the restore rehearsals"
        + (", and the pre-upgrade snapshot (an upgrade started meanwhile stays down)." if "headscale" in apps else ".")
        + promote,
        f.recovery,
        "nfsLoss",
        apps,
    )
    if f.disposable:
        stops = (
            f"A replaced {_names(apps, ' or ')} pod finds nothing to restore from and refuses to start; the writes "
            "since the export was lost are gone with the old pod."
        )
    else:
        stops = "A replaced pod serves the database its claim holds; nothing new reaches the replica."
    second = _scenario(
        "The backup target, then a pod replaced before it is back",
        "The applications whose pods were not replaced.",
        stops,
        f.recovery,
        "nfsLossThenPodReplaced",
        apps,
    )
    return [first, second]


def _cluster_loss(f: _Facts) -> dict[str, Any]:
    dns = {
        FailoverMode.K8GB: "k8gb moves the public name",
        FailoverMode.EXTERNAL_DNS: "the promoted stack publishes the public record",
        FailoverMode.NONE: "someone moves the public record by hand (failover none; the figure counts only its TTL)",
    }[f.failover]
    if f.active and not f.standbys:
        return _scenario(
            "The whole cluster",
            f"{_cap(f.tunnels)}.",
            "The whole control plane until the cluster is rebuilt and restored from "
            f"{f.nfs_text if f.nfs else 'the backups'}: there is no standby site.",
            f.recovery,
            None,
            [],
        )
    target = _sites(f.standbys) if f.active else "this site"
    source = (
        f"restores the latest replica from {f.nfs_text}"
        if f.stage is not DatabaseStage.POSTGRES
        else "promotes its CloudNativePG replica cluster"
    )
    note = "" if not f.active else " Figures estimated with this stack's inputs; the standby's own report has its own."
    return _scenario(
        "The whole active site (cluster)" if not f.active else "The whole cluster",
        f"{_cap(f.tunnels)}; the other sites' routers and gateways.",
        f"The control plane until an operator promotes {target}, which {source}; {dns}.{note}",
        f.recovery,
        "clusterLoss",
        f.apps,
    )


def _standby_scenarios(f: _Facts) -> list[dict[str, Any]]:
    """A standby serves nothing: its own failures cost the tailnet its fallback, not its control plane."""
    own = _scenario(
        "This site" + (" (its only node)" if f.single_node else " (the whole cluster)"),
        f"The active site `{f.active_site}` and the whole control plane.",
        "The fallback: until this site is back, a loss of the active site has no site to promote; this site's "
        "subnet routes and split DNS stop.",
        f.recovery,
        None,
        [],
    )
    promoted = _node_loss(f)
    promoted["scenario"] = "Once promoted: " + promoted["scenario"][:1].lower() + promoted["scenario"][1:]
    return [own, _cluster_loss(f), promoted]


def _oidc(f: _Facts) -> dict[str, Any] | None:
    if f.oidc is None:
        return None
    if f.oidc.only_start_if_available:
        return _scenario(
            "The OIDC provider",
            "A running Headscale and every registered node; pre-auth key registration.",
            "OIDC logins; and, with onlyStartIfAvailable, every Headscale start (crash, node loss, upgrade, "
            "promotion) waits until the issuer answers: the recovery times above hold only while it is reachable.",
            f.recovery,
            None,
            [],
        )
    return _scenario(
        "The OIDC provider",
        "Headscale (it starts without OIDC login when the issuer is down) and every registered node; pre-auth keys.",
        "OIDC logins to Headscale" + (" and Headplane" if f.headplane else "") + " until the issuer is back.",
        f.recovery,
        None,
        [],
    )


def _postgres_scenarios(f: _Facts) -> list[dict[str, Any]]:
    if f.stage is not DatabaseStage.POSTGRES:
        return []
    if not f.active:
        following = "streaming, then from the archive" if f.config.database.postgres.streaming_host else "the archive"
        return [
            _scenario(
                "The object store",
                "The active site; this replica cluster keeps what it has replayed"
                + (" and keeps streaming." if f.config.database.postgres.streaming_host else "."),
                f"Following the active site through {following}: a promotion then starts from an older state.",
                f.recovery,
                None,
                [],
            )
        ]
    if f.instances > 1:
        primary = _scenario(
            "The node of the PostgreSQL primary",
            "The replicas on the other nodes; Headscale reconnects through the read-write service once one is "
            "promoted.",
            "Database writes until CloudNativePG promotes a replica (its failover is not modelled by `recovery`).",
            f.recovery,
            None,
            [],
        )
    else:
        primary = _scenario(
            "The node of the PostgreSQL instance",
            f"{_cap(f.tunnels)}.",
            "Headscale, until the single instance and its volume are back (no replica to promote).",
            f.recovery,
            None,
            [],
        )
    store = _scenario(
        "The object store",
        "PostgreSQL and Headscale.",
        "WAL archiving and base backups (point-in-time recovery falls behind)"
        + ("; a standby following the archive stops following." if f.others else "."),
        f.recovery,
        None,
        [],
    )
    return [primary, store]


def failures(f: _Facts) -> list[dict[str, Any]]:
    """The failure scenarios of this configuration, each with what keeps working, what stops, and the figures."""
    if not f.active:
        rows = _standby_scenarios(f)
        if f.nfs is not None and f.litestream_apps:
            first, _ = _nfs_loss(f)
            rows.append(
                {
                    **first,
                    "scenario": f"The backup target ({f.nfs_text})",
                    "whatKeepsWorking": "The active site (it keeps serving from its local copies).",
                    "whatStops": "This site's promotion: the replica on the export is what it would restore.",
                }
            )
        rows += _postgres_scenarios(f)
        oidc = _oidc(f)
        if oidc is not None:
            rows.append({**oidc, "scenario": "The OIDC provider (during a promotion)"})
        return rows
    if f.stage is DatabaseStage.MIGRATING:
        return [
            _scenario(
                "The migration Job fails",
                f"{_cap(f.tunnels)}; the SQLite database and its replica, untouched.",
                "Nothing new: Headscale is already at 0 until the stage moves on (or back to sqlite).",
                f.recovery,
                None,
                [],
            ),
            *(_nfs_loss(f) if f.nfs is not None else []),
        ]
    rows = [
        _scenario(
            "A Headscale or Headplane container crashes" if f.headplane else "The Headscale container crashes",
            "The pod"
            + (", its volume with the local database, and its Litestream sidecar" if f.litestream_apps else "")
            + f"; {f.tunnels}.",
            f"While it restarts: {f.control_stops()}.",
            f.recovery,
            "containerCrash",
            f.apps,
        ),
        _node_loss(f),
    ]
    if not f.single_node:
        rows.append(_router_node_loss(f))
    rows += _postgres_scenarios(f)
    if f.nfs is not None and f.litestream_apps:
        rows += _nfs_loss(f)
    rows.append(_cluster_loss(f))
    oidc = _oidc(f)
    if oidc is not None:
        rows.append(oidc)
    rows.append(
        _scenario(
            "A second failure before the first is repaired",
            "Whatever neither failure touches.",
            "Outside what this report covers: check the remaining copies, nodes and endpoints before further "
            "maintenance.",
            f.recovery,
            None,
            [],
        )
    )
    return rows


# --------------------------------------------------------------------------------------------- maintenance


def maintenance(f: _Facts) -> list[dict[str, str]]:
    """Upgrades and voluntary disruptions: what each costs on this configuration."""
    config, recovery = f.config, f.recovery
    rows: list[dict[str, str]] = []
    replaced = recovery_rows(recovery, "podReplaced")
    hs = replaced.get("headscale")
    outage = "an outage (not modelled)"
    if hs:
        outage = f"an outage of about {_rto(hs)} (`recovery` podReplaced), nothing lost"
    if not f.active:
        upgrade = (
            "Nothing runs here, so nothing stops. The stack refuses a release that differs from its active's: "
            f"upgrade `{f.active_site}` first, then this site."
        )
    elif f.stage is DatabaseStage.POSTGRES:
        upgrade = (
            f"Recreate stops the old pod before the new one starts: {outage}. There is no pre-upgrade snapshot on "
            "PostgreSQL: take a CloudNativePG backup first. The version gate refuses a downgrade."
        )
    else:
        upgrade = (
            f"Recreate stops the old pod before the new one starts: {outage}. The `pre-upgrade` init container "
            "snapshots the database to the backup directory before the new release migrates it; the version gate "
            "refuses a downgrade. Standbys follow afterwards."
        )
    rows.append({"activity": "Upgrading Headscale (headscale.version and image)", "effect": upgrade})
    if f.headscale_runs:
        policy = {
            PolicyMode.FILE: "In `file` policy mode a policy change restarts Headscale too.",
            PolicyMode.APPLY: "Policy changes (`apply` mode) are written over the API without a restart.",
            PolicyMode.DATABASE_UNMANAGED: "Policy changes (`databaseUnmanaged`) go over the API without a restart.",
        }[config.policy.mode]
        rows.append(
            {
                "activity": "Changing Headscale's config or the tailnet policy",
                "effect": f"A change to its config rolls the pod: {outage}. {policy}",
            }
        )
    if f.headplane_runs:
        hp = replaced.get("headplane")
        hp_outage = f"about {_rto(hp)}" if hp else "an outage"
        rows.append(
            {
                "activity": "Upgrading or changing Headplane",
                "effect": f"Recreate: the web UI is away for {hp_outage}; Headscale and the tailnet are unaffected.",
            }
        )
    drain = []
    if f.single_node:
        drain.append(
            "Draining the only node stops everything on the site until it is back"
            + ("." if f.active else "; as a standby it serves nothing, so only the fallback is away.")
        )
    else:
        if f.headscale_runs:
            drain.append(
                f"Headscale{' and Headplane' if f.headplane_runs else ''} have no PodDisruptionBudget (one replica "
                f"cannot have a budget that lets a drain pass): a drain of their node costs {outage}."
            )
        drain.append(
            "Subnet routers: PodDisruptionBudget maxUnavailable 1, drain one node at a time and the routes stay."
            if f.routers > 1
            else "Subnet router: no PodDisruptionBudget; routes pause while its pod moves."
        )
        drain.append(
            "Gateway services: PodDisruptionBudget maxUnavailable 1, DNS and proxies stay."
            if f.services > 1
            else "Gateway services: no PodDisruptionBudget; DNS and proxies pause while the pod moves."
        )
    if f.stage is not DatabaseStage.SQLITE:
        drain.append(
            "CloudNativePG (its own budgets, `enablePDB` not rendered so on by default): "
            + (
                "it switches the primary over before the node drains."
                if f.instances > 1
                else "a single instance's budget blocks the drain of its node until it is handled by hand."
            )
        )
    rows.append({"activity": "Draining a node", "effect": " ".join(drain)})
    if f.others:
        dns = "DNS follows by itself" if f.failover is not FailoverMode.NONE else "move the public record by hand"
        tail = "" if f.stage is DatabaseStage.POSTGRES else ": its Litestream sidecar ships the tail, nothing is lost"
        rows.append(
            {
                "activity": "Planned switch to another site",
                "effect": f"Fence first (scale the old active to 0{tail}), then promote; the control plane is away "
                f"from the fencing until the promoted pods serve; {dns}. The `failover` output lists the steps.",
            }
        )
    return rows


# --------------------------------------------------------------------------------------------- limits and improvements


def limits(f: _Facts) -> list[str]:
    """What prevents a stronger availability claim on this configuration."""
    config, recovery = f.config, f.recovery
    out = [
        "Single writer: Headscale is one process (headscale.replicas is at most 1; upstream supports no second "
        "instance, even on one PostgreSQL), so every restart, upgrade and node loss is a control-plane outage."
    ]
    if f.headplane:
        out.append(
            "Headplane is a second singleton with its own database: restoring the whole control plane needs both "
            "backup directories."
        )
    node = recovery_rows(recovery, "nodeLoss").get("headscale")
    if f.stage is not DatabaseStage.POSTGRES and f.disposable and node is not None:
        out.append(
            f"Unreplicated tail: on disposable storage a node loss loses up to {_rpo(node)} of commits "
            f"(`recovery` nodeLoss; backup.litestream.syncInterval {config.backup.litestream.sync_interval} plus "
            "Litestream's monitor tick)."
        )
    if f.stage is not DatabaseStage.POSTGRES and f.disposable and not f.single_node:
        out.append(
            "No fencing: disposable storage does not stop a partitioned node's pod, which may keep replicating to "
            "the export while its replacement restores; power the node off or taint it out-of-service before "
            "trusting the replacement."
        )
    if not f.disposable and f.stage is not DatabaseStage.POSTGRES:
        detach = recovery.get("inputs", {}).get("facts", {}).get("forceDetachSeconds")
        wait = f" ({_seconds(detach)})" if detach is not None else ""
        out.append(
            f"Persistent storage pins the database to its claim: a node loss waits for the force detach{wait}, and a "
            "node-local class never moves."
        )
    if f.nfs is not None and f.litestream_apps:
        shared = ", the standby's only restore source" if f.others and "headscale" in f.litestream_apps else ""
        out.append(
            f"{_cap(f.nfs_text)} is a shared dependency: it holds the only replica of the "
            + _names(f.litestream_apps)
            + (" database" if len(f.litestream_apps) == 1 else " databases")
            + f"{shared}; while it is down a replaced pod "
            + ("cannot start." if f.disposable else "serves a copy that is no longer backed up.")
        )
    if f.single_node:
        out.append(
            "Single node: the node is the single point of failure of the site; nothing can be rescheduled, and "
            "draining it stops everything."
        )
    if f.others:
        promotion = recovery.get("inputs", {}).get("stated", {}).get("promotionSeconds")
        stated = f" (stated {_seconds(promotion)} in `recovery.promotionSeconds`)" if promotion is not None else ""
        out.append(
            f"Manual promotion: a site loss lasts until an operator decides to run `make promote`{stated}; "
            "nothing fails over by itself."
        )
    else:
        out.append("No standby site: losing the cluster means rebuilding it.")
    if f.failover is FailoverMode.NONE and f.others:
        out.append("No DNS failover (endpoint.failover: none): the public record is moved by hand after a promotion.")
    if f.stage is DatabaseStage.POSTGRES and f.instances == 1:
        out.append("Single PostgreSQL instance: the database has no replica to promote.")
    if f.stage is not DatabaseStage.SQLITE:
        out.append(
            "Headscale's upstream develops and tests against SQLite and keeps PostgreSQL for existing users; the "
            "postgres stage relies on that support."
        )
    if not f.single_node and f.routers == 1:
        out.append(
            "One subnet router: the site's routes hang on one pod, which a StatefulSet does not replace "
            "while its node is unreachable."
        )
    if f.oidc is not None and f.oidc.only_start_if_available:
        out.append(
            "The OIDC provider is a start dependency (onlyStartIfAvailable): no Headscale start succeeds "
            "while it is down."
        )
    if not config.backup.rehearsal.enabled and f.litestream_apps:
        out.append("No restore rehearsal: nothing proves the replica restores until a restore is needed.")
    stated = recovery.get("inputs", {}).get("stated", {})
    if stated:
        out.append(
            "The recovery times rest on stated inputs (image pull, start time, promotion time in `recovery`), not "
            "on a failure drill."
        )
    return out


def improvements(f: _Facts) -> list[str]:
    """What would strengthen the claim, from this configuration's own knobs."""
    config = f.config
    out: list[str] = []
    if f.others and f.failover is FailoverMode.NONE:
        out.append("Set endpoint.failover to `k8gb` or `externalDns`, so the public name follows a promotion.")
    if f.single_node:
        out.append("Add nodes: with one node nothing can be rescheduled, and nothing below can be spread.")
    else:
        if f.routers == 1:
            out.append(f"Raise gateway.routers.replicas to 2 or more (at most {f.nodes}) for route failover.")
        if f.services == 1:
            out.append(
                f"Raise gateway.services.replicas to 2 or more (at most {f.nodes}) so DNS and the proxies "
                "survive a node."
            )
        if f.stage is DatabaseStage.SQLITE:
            out.append(
                "Move to the postgres stage with more than one CloudNativePG instance (database.postgres.instances "
                f"is {f.instances}, at most {f.nodes}): database failover instead of restore-on-start. Headscale stays "
                "one process."
            )
        elif f.instances == 1:
            out.append(f"Raise database.postgres.instances (at most {f.nodes}) to get a replica to promote.")
    if f.stage is not DatabaseStage.POSTGRES and f.disposable:
        out.append(
            "Shorten backup.litestream.syncInterval to shrink the node-loss tail, or use persistent storage to lose "
            "nothing at the cost of the force-detach wait."
        )
    if f.nfs is not None and f.litestream_apps and config.backup.volsync is None:
        out.append(
            "Keep a second, independent copy of the backup export (off the storage it lives on), and protect the "
            "tailnet identity keys with it."
        )
    if not config.backup.rehearsal.enabled and f.litestream_apps:
        out.append("Turn the restore rehearsals back on (backup.rehearsal.enabled).")
    if f.oidc is not None and f.oidc.only_start_if_available:
        out.append(
            "Consider headscale.oidc.onlyStartIfAvailable: false, so an identity-provider outage does not "
            "block a restart."
        )
    if f.stage is not DatabaseStage.POSTGRES and f.disposable and not f.single_node:
        out.append("Write down (or automate) the fencing of a partitioned node before a replacement is trusted.")
    if f.others:
        out.append(
            "Rehearse the promotion in both directions (`make promote`) and state your on-call's time to decide in "
            "recovery.promotionSeconds."
        )
    out.append(
        "Measure image pull and start time on the cluster and state them in `recovery`; continuous availability "
        "would need a Headscale that supports more than one active instance, which upstream does not."
    )
    return out


def assumptions(f: _Facts) -> list[str]:
    """What the interpretation takes for granted."""
    config = f.config
    out = [
        "The declared replicas are healthy and spread as declared; one failure at a time.",
        "The cluster's own services work: API server, scheduler, CNI, Cilium LB IPAM, the ingress data plane, "
        "cert-manager" + (", the CloudNativePG operator" if f.stage is not DatabaseStage.SQLITE else "") + ".",
    ]
    if config.cluster.exclude_nodes:
        out.append(
            f"cluster.nodes ({f.nodes}) counts the nodes the control plane may use: cluster.excludeNodes ("
            + _sites(sorted(config.cluster.exclude_nodes))
            + ") is taken as not among them."
        )
    out.append(
        "Figures are the `recovery` output's: read from the rendered objects, measured (bench/measured), or stated "
        "in config."
    )
    return out


# --------------------------------------------------------------------------------------------- the report


def availability_report(config: StackConfig, recovery: dict[str, Any]) -> dict[str, Any]:
    """The `availability` output: classification, redundancy, failure scenarios, maintenance, limits and what would
    improve them, from ``config`` and the stack's ``recovery`` output (every figure is that output's)."""
    f = _Facts(config, recovery)
    return {
        "source": SOURCE,
        "site": f.site,
        "role": config.role.value,
        "serving": f.active and f.headscale_runs,
        "stage": f.stage.value,
        "storage": f.storage.value,
        "nodes": f.nodes,
        "classification": classification(config, f),
        "assumptions": assumptions(f),
        "redundancy": redundancy(f),
        "failures": failures(f),
        "maintenance": maintenance(f),
        "limits": limits(f),
        "improvements": improvements(f),
    }


#: Where the report's prose is published, relative to the repository (tools/availability_docs.py writes it).
DETAILS = "docs/availability/{stack}.md"


def availability_output(stack: str, report: dict[str, Any]) -> dict[str, Any]:
    """The `availability` stack output: the classification and, per failure scenario, its figures and the
    `recovery` row they come from. The prose (what keeps working, what stops, maintenance, limits, improvements)
    is the page ``details`` names, generated from the same report, so the output stays small enough to read in
    `pulumi stack output` and to diff."""
    keys = ("site", "role", "serving", "stage", "storage", "nodes", "classification")
    return {
        "source": report["source"],
        **{key: report[key] for key in keys},
        "failures": [
            {key: row[key] for key in ("scenario", "rto", "rpo", "recovery", "figures")} for row in report["failures"]
        ],
        "details": DETAILS.format(stack=stack),
    }


# --------------------------------------------------------------------------------------------- Markdown


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(stack: str, report: dict[str, Any]) -> str:
    """The report as a Markdown page (docs/availability/<stack>.md); deterministic, ends with how to regenerate."""
    role = report["role"] + ("" if report["serving"] or report["role"] == "standby" else ", not serving")
    lines = [
        f"# Availability of `{stack}`",
        "",
        f"Site `{report['site']}`, {role}, database stage `{report['stage']}`, local storage "
        f"`{report['storage']}`, {report['nodes']} node(s).",
        "",
        f"**Classification:** {report['classification']}.",
        "",
        f"_{report['source'][0].upper()}{report['source'][1:]}._",
        "",
        "## Assumptions",
        "",
        *[f"- {item}" for item in report["assumptions"]],
        "",
        "## What supplies redundancy",
        "",
        *_table(
            ["Component", "Declared layout", "Mechanism"],
            ([r["component"], r["layout"], r["mechanism"]] for r in report["redundancy"]),
        ),
        "",
        "## Failure scenarios",
        "",
        "Recovery time and data lost are the `recovery` output's figures for the row named; "
        '"not modelled" means that output has none.',
        "",
        *_table(
            ["Failure", "What keeps working", "What stops", "Recovery time", "Data lost", "`recovery` row"],
            (
                [
                    r["scenario"],
                    r["whatKeepsWorking"],
                    r["whatStops"],
                    r["rto"],
                    r["rpo"],
                    f"`{r['recovery']}`" if r["recovery"] else "-",
                ]
                for r in report["failures"]
            ),
        ),
        "",
        "## Upgrades and voluntary maintenance",
        "",
        *_table(["Activity", "Effect"], ([r["activity"], r["effect"]] for r in report["maintenance"])),
        "",
        "## What prevents a stronger claim",
        "",
        *[f"- {item}" for item in report["limits"]],
        "",
        "## What would improve it",
        "",
        *[f"- {item}" for item in report["improvements"]],
        "",
        "---",
        "",
        f"Generated from the `availability` output of stack `{stack}` (program/availability.py); do not edit by "
        f"hand. Regenerate with {REGENERATE}.",
        "",
    ]
    return "\n".join(lines)
