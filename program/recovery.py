"""The recovery model: RTO and RPO per failure, from the rendered pod specs, measured figures and stated inputs.

Every number has one of three sources, and the output says which:
- read from what the stack renders: the tolerations (how long a pod stays on a silent node), the kind of the
  `data` volume (disposable or a claim that must be detached first), the restore init container's CPU limit, the
  readiness probe, Litestream's sync interval, the endpoint's DNS TTL, the number of nodes;
- measured by `python -m bench.restore --record` with the real Litestream binary and committed as
  `bench/measured/restore.json` (restore CPU cost and wall time per MB, and the data lost on a kill -9);
- stated by the user in the `recovery` config section (image pull, start time, database sizes, the
  controller-manager's node grace period, how long a promotion takes), because nothing offline can know them.
Kubernetes' fixed behaviours used here are facts with their source named: the attach-detach controller force-
detaches a volume from an unreachable node after 6 minutes; the kubelet's first crash back-off is 10 s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.litestream_config import parse_go_duration
from headscale_ha.components.settings import RecoverySettings, Role
from headscale_ha.components.workload import PodRecoveryFacts
from headscale_ha.program.config import StackConfig

ROOT = Path(__file__).resolve().parent.parent
MEASURED_FILE = ROOT / "bench" / "measured" / "restore.json"
PROMOTION_FILE = ROOT / "bench" / "measured" / "promotion.json"
TAKEOVER_FILE = ROOT / "bench" / "measured" / "takeover.json"
#: kube-controller-manager's attach-detach controller: maxWaitForUnmountDuration, 6 minutes, not configurable. An RWO
#: volume of an unreachable node stays attached that long unless the node is tainted out-of-service.
FORCE_DETACH_SECONDS = 360
#: The kubelet's crash-loop back-off starts at 10 s (then 20 s, 40 s, ... up to 5 minutes).
FIRST_RESTART_BACKOFF_SECONDS = 10
#: Litestream 0.5 turns new WAL frames into an LTX file on each 1 s monitor tick, then ships on its sync tick.
LITESTREAM_MONITOR_SECONDS = 1.0
APPS = ("headscale", "headplane")
T = TypeVar("T")
MIB = 1024 * 1024


class MeasurementError(Exception):
    """The measured figures are missing or malformed: run `python -m bench.restore --record`."""


@dataclass(frozen=True, kw_only=True)
class RestoreFigures:
    """What `bench/restore.py --record` measured with the real Litestream binary."""

    litestream: str
    measured_on: str
    method: str  # how the throttled time was obtained: a real cgroup quota, or CPU time / limit
    cpu_seconds_per_mb: float  # CPU time of a restore with the full integrity check, per MB of database
    wall_seconds_per_mb: float  # wall time of the same restore without a CPU limit, per MB
    kill_lost_seconds_max: float  # commits lost when litestream is SIGKILLed, worst run, at ``sync_interval``
    sync_interval: str  # the sync interval of that measurement

    def restore_seconds(self, megabytes: float, cpu_limit: float | None) -> float:
        """A restore of ``megabytes`` under a CPU limit of ``cpu_limit`` cores (None: unlimited)."""
        per_mb = self.wall_seconds_per_mb
        if cpu_limit is not None and cpu_limit > 0:
            per_mb = max(per_mb, self.cpu_seconds_per_mb / cpu_limit)
        return megabytes * per_mb

    def as_output(self) -> dict[str, Any]:
        return {
            "source": str(MEASURED_FILE.relative_to(ROOT)),
            "litestream": self.litestream,
            "measuredOn": self.measured_on,
            "method": self.method,
            "restoreCpuSecondsPerMB": self.cpu_seconds_per_mb,
            "restoreWallSecondsPerMB": self.wall_seconds_per_mb,
            "killLostSecondsMax": self.kill_lost_seconds_max,
            "killSyncInterval": self.sync_interval,
        }


def _sourced(path: Path, measured_on: str, method: str, figures: dict[str, Any]) -> dict[str, Any]:
    """A measurement as the output shows it: where it is committed, when and how it was measured, its figures."""
    return {"source": str(path.relative_to(ROOT)), "measuredOn": measured_on, "method": method, **figures}


def _measured(path: Path, what: str, bench: str, read: Callable[[Any], T], *, how: str = "") -> T:
    """A committed measurement read by ``read``; a clear error naming the file and the bench that records it when
    it is missing or malformed."""
    try:
        return read(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MeasurementError(
            f"{path}: the measured {what} figures are missing or malformed ({exc!r}); "
            f"run `python -m {bench} --record` to measure them{how}"
        ) from exc


def load_restore_figures(path: Path = MEASURED_FILE) -> RestoreFigures:
    """The committed measurement of a restore and of a kill's loss."""

    def read(data: Any) -> RestoreFigures:
        return RestoreFigures(
            litestream=str(data["litestream"]),
            measured_on=str(data["measuredOn"]),
            method=str(data["method"]),
            cpu_seconds_per_mb=float(data["restore"]["cpuSecondsPerMB"]),
            wall_seconds_per_mb=float(data["restore"]["wallSecondsPerMB"]),
            kill_lost_seconds_max=float(data["rpo"]["killLostSecondsMax"]),
            sync_interval=str(data["rpo"]["syncInterval"]),
        )

    return _measured(path, "restore", "bench.restore", read, how=" with the real Litestream binary")


@dataclass(frozen=True, kw_only=True)
class PromotionFigures:
    """What the benches measured of `make promote`: with the active lost (its fence skipped, as on the day a cluster
    is lost) by bench/real_runs.py on real actors, the rollout it awaits left out; with the active reachable
    (fenced, with the wait for its pod to go) by bench/promotion.py on the engine model. ``method`` is the lost
    case's."""

    measured_on: str
    lost_seconds: float  # the command's run time with the active lost
    reachable_seconds: float  # … with it reachable, the fence's wait included
    method: str

    def as_output(self) -> dict[str, Any]:
        figures = {
            "promoteActiveLostSeconds": self.lost_seconds,
            "promoteActiveReachableSeconds": self.reachable_seconds,
        }
        return _sourced(PROMOTION_FILE, self.measured_on, self.method, figures)


def load_promotion_figures(path: Path = PROMOTION_FILE) -> PromotionFigures:
    """The committed measurement of the promotion command."""

    def read(data: Any) -> PromotionFigures:
        lost = data["lost"]  # measured with real actors (bench/real_runs.py) when it names its own method
        return PromotionFigures(
            measured_on=str(lost.get("measuredOn", data["measuredOn"])),
            lost_seconds=float(lost["commandSeconds"]) + float(lost["waitSeconds"]),
            reachable_seconds=float(data["reachable"]["commandSeconds"]) + float(data["reachable"]["waitSeconds"]),
            method=str(lost.get("method", data["method"])),
        )

    return _measured(path, "promotion", "bench.promotion", read)


@dataclass(frozen=True, kw_only=True)
class TakeoverFigures:
    """What bench/witness_replica.py measured of a takeover behind the witness lease, at its timing: from the
    holder's loss to the other site's first write, less that site's restore (which the model computes from the
    stack's own database size and restore limit). The slower of its scenarios (the holder lost or partitioned)."""

    measured_on: str
    method: str
    median_seconds: float  # the median wait for the Lease, restore left out
    max_seconds: float
    lease_and_skew_seconds: float  # the measured timing's leaseSeconds + skewSeconds, which the wait follows

    def wait_seconds(self, lease_and_skew_seconds: float) -> float:
        """The wait at another timing: a gate takes over once the Lease expired and the skew bound passed, so the
        wait moves with leaseSeconds + skewSeconds."""
        return self.median_seconds + lease_and_skew_seconds - self.lease_and_skew_seconds

    def as_output(self) -> dict[str, Any]:
        figures = {
            "takeoverWithoutRestoreMedianSeconds": self.median_seconds,
            "takeoverWithoutRestoreMaxSeconds": self.max_seconds,
            "measuredLeaseAndSkewSeconds": self.lease_and_skew_seconds,
        }
        return _sourced(TAKEOVER_FILE, self.measured_on, self.method, figures)


def load_takeover_figures(path: Path = TAKEOVER_FILE) -> TakeoverFigures:
    """The committed measurement of a takeover behind the witness lease."""

    def read(data: Any) -> TakeoverFigures:
        slower = max(data["scenarios"].values(), key=lambda scenario: float(scenario["withoutRestoreMedianSeconds"]))
        timing = data["timing"]
        return TakeoverFigures(
            measured_on=str(data["measuredOn"]),
            method=str(data["method"]),
            median_seconds=float(slower["withoutRestoreMedianSeconds"]),
            max_seconds=float(slower["withoutRestoreMaxSeconds"]),
            lease_and_skew_seconds=float(timing["LEASE_SECONDS"]) + float(timing["SKEW_SECONDS"]),
        )

    return _measured(path, "takeover", "bench.witness_replica", read)


def _round(seconds: float) -> float:
    return math.ceil(seconds * 10) / 10


def _row(
    failure: str, steps: dict[str, float], rpo: float | str, how: str, *, until: str | None = None
) -> dict[str, Any]:
    """One failure: RTO is the sum of its steps, or None ``until`` something comes back; an RPO that is not a
    number of seconds says what is lost."""
    return {
        "failure": failure,
        "rtoSeconds": None if until else _round(sum(steps.values())),
        "until": until,
        "rpoSeconds": _round(rpo) if isinstance(rpo, int | float) else None,
        "rpoLost": rpo if isinstance(rpo, str) else None,
        "steps": {name: _round(value) for name, value in steps.items()},
        "how": how,
    }


@dataclass(frozen=True, kw_only=True)
class RecoveryInputs:
    """What the recovery model reads of the stack config: the stated figures, and what the stack renders that is
    not in a pod spec (the pods' own facts come from the components that render them)."""

    serving: bool  # the active site
    storage: str  # backup.local.storage: disposable or persistent
    stage: str  # database.stage
    sync_seconds: float  # Litestream's sync interval
    nodes: int
    dns_ttl_seconds: int  # the public record's TTL
    stated: RecoverySettings  # the `recovery` section
    #: With automatic failover: the Lease's leaseSeconds + skewSeconds (a takeover waits that out); None: off.
    lease_and_skew_seconds: float | None = None


def recovery_inputs(config: StackConfig) -> RecoveryInputs:
    litestream, failover = config.backup.litestream, config.tailnet.failover
    return RecoveryInputs(
        serving=config.role is Role.ACTIVE,
        storage=config.backup.local.storage.value,
        stage=config.database.stage.value,
        sync_seconds=parse_go_duration(litestream.sync_interval, argument="backup.litestream.syncInterval") / 1e9,
        nodes=config.cluster.nodes,
        dns_ttl_seconds=config.endpoint.ttl,
        stated=config.recovery,
        lease_and_skew_seconds=float(failover.lease_seconds + failover.skew_seconds) if failover.automatic else None,
    )


def _size_mb(recovery: RecoverySettings, app: str) -> float:
    size = recovery.headscale_database_size if app == "headscale" else recovery.headplane_database_size
    return quantity_value(size) / 1e6


@dataclass(frozen=True, kw_only=True)
class _Steps:
    """The durations one application's recovery is made of, from its pod facts and the inputs."""

    pull: float  # images pulled on a node that has none
    start: float  # from the start to the first ready answer
    restore: float  # the restore of the replica (disposable storage)
    detect: dict[str, float]  # a silent node marked unreachable, then the pod evicted
    tail: float  # what Litestream has not shipped when a node dies
    disposable: bool


def _steps(facts: PodRecoveryFacts, inputs: RecoveryInputs, figures: RestoreFigures) -> _Steps:
    stated = inputs.stated
    return _Steps(
        pull=float(stated.image_pull_seconds),
        start=float(stated.start_seconds + facts.readiness_period_seconds),
        restore=figures.restore_seconds(_size_mb(stated, facts.app), facts.restore_cpu_limit),
        detect={"detection": float(stated.node_monitor_grace_seconds + facts.eviction_seconds)},
        tail=inputs.sync_seconds + LITESTREAM_MONITOR_SECONDS,
        disposable=facts.volume != "persistentVolumeClaim",
    )


def _restarts(s: _Steps) -> list[dict[str, Any]]:
    return [
        _row(
            "containerCrash",
            {"restartBackoff": FIRST_RESTART_BACKOFF_SECONDS, "start": s.start},
            0,
            "The kubelet restarts the container in the same pod; the local volume and the sidecar stay.",
        ),
        _row(
            "podReplaced",
            {"imagePull": s.pull, "restore": s.restore if s.disposable else 0.0, "start": s.start},
            0,
            "A graceful stop (drain, eviction, rollout; Recreate stops the old pod first): the sidecar stops last "
            "and ships the tail, so nothing is lost; "
            + ("the new pod restores from the replica." if s.disposable else "the claim moves with the pod."),
        ),
    ]


def _node_loss(s: _Steps, nodes: int) -> dict[str, Any]:
    if nodes == 1:
        how = "The only node: losing it is losing the site (see clusterLoss)."
        return _row("nodeLoss", s.detect, s.tail, how, until="the node returns")
    if s.disposable:
        return _row(
            "nodeLoss",
            {**s.detect, "volumeDetach": 0.0, "imagePull": s.pull, "restore": s.restore, "start": s.start},
            s.tail,
            "The replacement starts on another node with a new disposable volume and restores; commits not yet "
            "replicated (at most the sync interval plus Litestream's 1 s monitor tick) are lost.",
        )
    return _row(
        "nodeLoss",
        {**s.detect, "volumeDetach": float(FORCE_DETACH_SECONDS), "imagePull": s.pull, "start": s.start},
        0,
        "The claim stays attached to the dead node until the attach-detach controller forces it off "
        "(6 minutes; sooner if you taint the node out-of-service); network storage only: a node-local "
        "class never moves.",
    )


def _nfs_loss(s: _Steps) -> list[dict[str, Any]]:
    lost = _row(
        "nfsLoss",
        {},
        0,
        "The application keeps serving from its local copy; replication stops (the rehearsal and the "
        "sidecar fail), so the replica falls behind until the export is back.",
    )
    if s.disposable:
        replaced = _row(
            "nfsLossThenPodReplaced",
            {},
            "writes since the export was lost",
            "A disposable pod replaced during the outage has nothing to restore from: the restore refuses to "
            "start empty (exit 20) and the application stays down; the stopped pod's final sync failed too.",
            until="the NFS export is back",
        )
    else:
        replaced = _row(
            "nfsLossThenPodReplaced",
            {"imagePull": s.pull, "start": s.start},
            0,
            "The claim still holds the database: the restore serves it as it is (and warns).",
        )
    return [lost, replaced]


#: How a whole cluster's loss is recovered, by hand or behind the witness lease.
_BY_HAND = (
    "An operator notices and decides (decision, stated in recovery.promotionSeconds), then runs "
    "`make promote SITE=<standby> LOST=<active>` (its own run time measured by bench/promotion.py); the "
    "standby restores the replica from the NFS export outside both clusters before serving; clients follow "
    "the public name after its TTL."
)
_BEHIND_THE_LEASE = (
    "No human: the other site's pod, waiting in its gate, takes the witness Lease once the lost holder's has "
    "expired and the skew bound passed (leaseTakeover: measured by bench/witness_replica.py, moved by this "
    "stack's leaseSeconds + skewSeconds), restores the replica and serves; clients follow the public name "
    "after its TTL."
)
_FOLLOWING_THE_LEASE = (
    "No human: once the other site's Headscale took the witness Lease (leaseTakeover, as Headscale's row), its "
    "Headplane's follower waits a whole lease more (followLease: leaseSeconds + skewSeconds, so that the lost "
    "site's Headplane has stopped), then restores Headplane's replica and serves; counted after the DNS TTL too, "
    "an upper bound (the two overlap)."
)


def _cluster_loss(
    s: _Steps,
    inputs: RecoveryInputs,
    promotion_figures: PromotionFigures,
    takeover: TakeoverFigures | None,
    *,
    follows: bool = False,
) -> dict[str, Any]:
    """The other site serves: after a human's decision and `make promote`, or (``takeover``) after its gate took
    the Lease (``follows``: and its follower waited a whole lease after that, as Headplane's does); then the
    rollout's pull, restore and start, and the DNS TTL."""
    if takeover is None or inputs.lease_and_skew_seconds is None:
        before = {"decision": float(inputs.stated.promotion_seconds), "promoteCommand": promotion_figures.lost_seconds}
        how = _BY_HAND
    else:
        before, how = {"leaseTakeover": takeover.wait_seconds(inputs.lease_and_skew_seconds)}, _BEHIND_THE_LEASE
        if follows:
            before["followLease"], how = inputs.lease_and_skew_seconds, _FOLLOWING_THE_LEASE
    steps = {**before, "imagePull": s.pull, "restore": s.restore, "start": s.start}
    return _row("clusterLoss", {**steps, "dnsTtl": float(inputs.dns_ttl_seconds)}, s.tail, how)


def application_model(
    facts: PodRecoveryFacts,
    *,
    inputs: RecoveryInputs,
    figures: RestoreFigures,
    promotion_figures: PromotionFigures,
    takeover: TakeoverFigures | None = None,
) -> list[dict[str, Any]]:
    """RTO and RPO of one SQLite application per failure, from its pod facts; ``takeover`` with automatic
    failover (Headplane follows Headscale's holder, a lease later)."""
    steps = _steps(facts, inputs, figures)
    cluster = _cluster_loss(steps, inputs, promotion_figures, takeover, follows=facts.app != "headscale")
    return [*_restarts(steps), _node_loss(steps, inputs.nodes), *_nfs_loss(steps), cluster]


def _read_inputs(facts: PodRecoveryFacts, inputs: RecoveryInputs) -> dict[str, Any]:
    """What the model read of one application's pod (the `inputs.rendered` of the output)."""
    return {
        "dataVolume": facts.volume,
        "evictionSeconds": facts.eviction_seconds,
        "restoreCpuLimit": facts.restore_cpu_limit,
        "readinessPeriodSeconds": facts.readiness_period_seconds,
        "databaseMB": round(_size_mb(inputs.stated, facts.app), 1),
    }


def recovery_model(
    inputs: RecoveryInputs,
    pods: Mapping[str, PodRecoveryFacts],
    figures: RestoreFigures | None = None,
    promotion: PromotionFigures | None = None,
    takeover: TakeoverFigures | None = None,
) -> dict[str, Any]:
    """The `recovery` output: per application, RTO and RPO per failure, with every input and its source."""
    figures = figures or load_restore_figures()
    promotion = promotion or load_promotion_figures()
    automatic = inputs.lease_and_skew_seconds is not None
    takeover = (takeover or load_takeover_figures()) if automatic else None
    applications: dict[str, Any] = {}
    read: dict[str, Any] = {}
    for app in APPS:
        facts = pods.get(app)
        if facts is None:
            continue
        if not facts.restores:
            applications[app] = {
                "modelled": False,
                "why": "Headscale runs on PostgreSQL: recovery is CloudNativePG's failover between instances, "
                "not a restore.",
            }
            continue
        failures = application_model(
            facts,
            inputs=inputs,
            figures=figures,
            promotion_figures=promotion,
            takeover=takeover,
        )
        applications[app] = {"modelled": True, "failures": failures}
        read[app] = _read_inputs(facts, inputs)
    stated = inputs.stated
    return {
        "serving": inputs.serving,
        "storage": inputs.storage,
        "stage": inputs.stage,
        "applications": applications,
        "inputs": {
            "rendered": {
                **read,
                "syncIntervalSeconds": inputs.sync_seconds,
                "nodes": inputs.nodes,
                "dnsTtlSeconds": inputs.dns_ttl_seconds,
            },
            "measured": {
                **figures.as_output(),
                "promotion": promotion.as_output(),
                **({"takeover": takeover.as_output()} if takeover is not None else {}),
            },
            "stated": {
                "imagePullSeconds": stated.image_pull_seconds,
                "startSeconds": stated.start_seconds,
                "headscaleDatabaseSize": stated.headscale_database_size,
                "headplaneDatabaseSize": stated.headplane_database_size,
                "nodeMonitorGraceSeconds": stated.node_monitor_grace_seconds,
                "promotionSeconds": stated.promotion_seconds,
            },
            "facts": {
                "forceDetachSeconds": FORCE_DETACH_SECONDS,
                "firstRestartBackoffSeconds": FIRST_RESTART_BACKOFF_SECONDS,
                "litestreamMonitorSeconds": LITESTREAM_MONITOR_SECONDS,
            },
        },
    }
