"""End to end: real ``litestream replicate`` with the program's config and metrics on, the exporter looping every
second under busybox sh into a directory served by ``busybox httpd``, and a real Prometheus scraping both every second
and evaluating the rendered rules every second.

Healthy replication must leave LitestreamReplicationStalled and LitestreamReplicaUnreadable inactive; a replica
target replaced by a regular file must make both *pending* within a derived bound, and a replica Litestream can no
longer write (read-only, still listable) must make LitestreamReplicationStalled pending once the replication lag bound
has passed. The rendered ``for`` is minutes, so end to end only the pending transition is observed; the transition to
firing is covered by the promtool unit tests (test_alerts_promtool.py). Once the rules are armed, every Grafana
dashboard query (components/dashboard.py) runs against the same Prometheus: each over a series the lab serves must
return one, and exactly those in E2E_DASHBOARD_NOT_COVERED (series of components the lab does not run) return none.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components.alerts import (
    EXPORTER_HTTPD_CONF,
    EXPORTER_JOB,
    EXPORTER_METRICS_PATH,
    prom_duration,
    replication_lag_bound,
    rule_file,
)
from headscale_ha.components.dashboard import dashboard_model, dashboard_queries
from headscale_ha.components.monitoring import key_metrics
from tests.support.alert_scopes import NS, SCOPES
from tests.support.free_ports import free_port
from tests.support.litestream_lab import (
    App,
    Writer,
    busybox_bin_dir,
    connect_wal,
    hand_over,
    insert_rows,
    litestream_bin,
    read_only_tree,
    replicating_as,
    state_exporter_env,
    state_exporter_running,
    wait_until,
    write_metrics_config,
)
from tests.support.prometheus_lab import Prometheus, busybox_httpd, content_type, prometheus_server

LITESTREAM = litestream_bin()
#: The pod's user: Litestream runs as it when the tests run as root, so a read-only replica stops it as in the pod.
POD_USER = 65532
LAB_USER = POD_USER if os.geteuid() == 0 else None

E2E_APPS = ("headscale", "headplane")
#: The lab's intervals (seconds): Prometheus scrapes and evaluates, the exporter lists, Litestream syncs.
SCRAPE = EVALUATION = EXPORTER_INTERVAL = SYNC = 1
LAG = replication_lag_bound(
    scrape_interval_seconds=SCRAPE,
    exporter_interval_seconds=EXPORTER_INTERVAL,
    sync_interval_seconds=SYNC,
    evaluation_interval_seconds=EVALUATION,
)
#: One exporter round (two `litestream ltx` listings) takes well under a second here; allowed one.
ROUND = 1
#: Process scheduling and the API poll (every 0.2 s) on a loaded 2-CPU runner.
SLACK = 2
#: A replica that cannot be read: the next round (its interval plus the round) writes up=0 and txid=0, the next scrape
#: reads it, the next evaluation makes both alerts pending.
BOUND_UNREADABLE = EXPORTER_INTERVAL + ROUND + SCRAPE + EVALUATION + SLACK
#: A replica that stops advancing (still listable): its txid freezes at once; the local txid Litestream had when the
#: replica froze is scraped within a scrape interval, the rule compares the replica with the local txid LAG earlier,
#: so the condition holds LAG + SCRAPE after the break at the latest, and the next evaluation makes it pending.
BOUND_FROZEN = LAG + SCRAPE + EVALUATION + SLACK
#: ... and not before the commits the replica lacks are LAG old, minus what a healthy replica may trail by.
EARLIEST_FROZEN = LAG - (1 + SYNC + EXPORTER_INTERVAL + 2 * SCRAPE + EVALUATION)
#: How long healthy replication is watched once the rule has real data (six evaluations).
HEALTHY_SECONDS = 6
WATCHED = ("LitestreamReplicationStalled", "LitestreamReplicaUnreadable")
E2E_SCOPE = dataclasses.replace(SCOPES["sqlite-active"], replication_lag_seconds=LAG)
#: The lab's exporter appends a keys file, as the pod's does from its ConfigMap: the keys panel has real series.
E2E_DASHBOARD = dashboard_model(E2E_SCOPE, keys=True)
#: Dashboard panels over series of components the lab does not run: their queries must return nothing there.
E2E_DASHBOARD_NOT_COVERED = {
    "Headscale metrics target": "no Headscale server runs in the lab, so Prometheus has no `headscale` target",
    "Ready replicas": "kube-state-metrics series: the lab has no Kubernetes",
    "Subnet routers ready": "kube-state-metrics series: the lab has no Kubernetes",
    "Restore and pre-upgrade restarts (15 min)": "kube-state-metrics series: the lab has no Kubernetes",
    "Time left on the public certificate": "cert-manager's series: the lab runs no cert-manager",
}


@dataclass
class EndToEnd:
    """What the end-to-end run observed; the tests below assert on it (the processes are gone by then)."""

    content_type: str | None = None
    armed_after: float = 0.0  # seconds from Prometheus' start until the rule had LAG seconds of history
    healthy_active: list[dict[str, Any]] = field(default_factory=list)  # watched alerts seen while healthy
    healthy_txids: dict[str, tuple[float, float]] = field(default_factory=dict)  # app -> local txid before/after
    healthy_replica_txids: dict[str, float] = field(default_factory=dict)
    pending_after: dict[tuple[str, str], float] = field(default_factory=dict)  # (alert, app) -> s from the break
    sync_errors: dict[str, float] = field(default_factory=dict)
    monitor_error_logged: bool = False
    litestream_user: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # seconds since the run started, at the end of each phase
    dashboard_series: dict[tuple[str, str], int] = field(default_factory=dict)  # (panel, query) -> series returned


def _by_app(result: list[dict[str, Any]]) -> dict[str, float]:
    return {item["metric"].get("app", ""): float(item["value"][1]) for item in result}


#: What the lab compares: each application's local txid (now, and LAG ago) and its replica's txid.
LOCAL_TXID = f'max by (app) (litestream_txid{{namespace="{NS}",container="litestream"}})'
LOCAL_TXID_LAG_AGO = f'max by (app) (litestream_txid{{namespace="{NS}",container="litestream"}} offset {LAG}s)'
REPLICA_TXID = f'max by (app) (headscale_ha_replica_txid{{namespace="{NS}"}})'


@dataclass
class _Lab:
    """One end-to-end run in progress: its directory, the stack that stops its processes, and its record."""

    base: Path
    stack: ExitStack
    record: EndToEnd
    origin: float = field(default_factory=time.monotonic)
    ports: dict[str, int] = field(default_factory=dict)  # app -> its Litestream's metrics port
    httpd_port: int = 0

    @property
    def backup(self) -> Path:
        return self.base / "backup"

    @property
    def www(self) -> Path:
        return self.base / "www"

    def phase(self, name: str) -> None:
        """Record that phase ``name`` ended, in seconds since the run started."""
        self.record.phases[name] = round(time.monotonic() - self.origin, 2)


def _run_end_to_end(base: Path, stack: ExitStack, record: EndToEnd) -> None:
    """Prometheus starts first: version 2 applies its targets only after a 5 s discovery tick, which then overlaps
    with Litestream's start. Everything is registered on ``stack``, so it stops whatever happens."""
    assert LITESTREAM is not None
    lab = _Lab(base, stack, record)
    _lay_out(lab)
    prom = _start_prometheus(lab)
    started = time.monotonic()
    lab.phase("prometheus ready")
    _start_replication(lab)
    lab.phase("litestream replicating")
    _start_exporter(lab)
    lab.phase("exporter and httpd serving")
    armed = wait_until(lambda: _armed(prom), timeout=LAG + 30, interval=0.25)
    assert armed, "Prometheus never had the data the rules need"
    record.armed_after = time.monotonic() - started
    lab.phase("armed")
    record.dashboard_series = {query: len(prom.query(query[1])) for query in dashboard_queries(E2E_DASHBOARD)}
    lab.phase("dashboard queried")
    _watch_healthy(prom, record)
    lab.phase("healthy watched")
    _break_replicas(lab)
    _watch_the_break(lab, prom)
    lab.phase("break observed")


def _lay_out(lab: _Lab) -> None:
    """The backup root, the exporter's output directory, the httpd config and every port the lab listens on."""
    lab.backup.mkdir()
    lab.www.mkdir()
    (lab.base / "httpd.conf").write_text(EXPORTER_HTTPD_CONF)
    lab.ports = {name: free_port() for name in E2E_APPS}
    lab.httpd_port = free_port()


def _scrape_configs(lab: _Lab) -> list[dict[str, Any]]:
    """Each application's Litestream, and the exporter's file behind busybox httpd, as the program's monitors do."""
    litestream_targets = [
        {
            "targets": [f"127.0.0.1:{lab.ports[name]}"],
            "labels": {"namespace": NS, "app": name, "pod": f"{name}-0", "container": "litestream"},
        }
        for name in E2E_APPS
    ]
    exporter_target = {
        "targets": [f"127.0.0.1:{lab.httpd_port}"],
        "labels": {"namespace": NS, "pod": "state-exporter-0", "container": "exporter"},
    }
    return [
        {"job_name": "litestream", "static_configs": litestream_targets},
        # honor_labels: the exporter's own `app` label names the application (the program's monitor keeps it)
        {
            "job_name": EXPORTER_JOB,
            "metrics_path": EXPORTER_METRICS_PATH,
            "honor_labels": True,
            "static_configs": [exporter_target],
        },
    ]


def _start_prometheus(lab: _Lab) -> Prometheus:
    rules = lab.base / "rules.yml"
    rules.write_text(rule_file(E2E_SCOPE))
    return lab.stack.enter_context(
        prometheus_server(
            lab.base / "prometheus",
            scrape_configs=_scrape_configs(lab),
            rule_files=[rules],
            scrape_interval=f"{SCRAPE}s",
            evaluation_interval=f"{EVALUATION}s",
        )
    )


def _start_replication(lab: _Lab) -> None:
    """Each application's database, written to all along, replicated by Litestream (as the pod's user under root)."""
    assert LITESTREAM is not None
    lab.record.litestream_user = f"uid {LAB_USER}" if LAB_USER is not None else "this process's user"
    for name in E2E_APPS:
        app = App(lab.base / name)
        metrics_addr = f"127.0.0.1:{lab.ports[name]}"
        write_metrics_config(app, replica_dir=lab.backup / name / "replica", metrics_addr=metrics_addr)
        connect_wal(app.db_path).close()
        insert_rows(app.db_path, 5)
        if LAB_USER is not None:  # the pod's volumes belong to the pod's user; SQLite as root keeps that owner
            hand_over(LAB_USER, app.data_dir, *app.data_dir.iterdir(), lab.backup / name)
        lab.stack.enter_context(replicating_as(LITESTREAM, app, lab.base / f"{name}-litestream.log", user=LAB_USER))
        writer = Writer(app.db_path, rate=20).start()
        lab.stack.callback(writer.stop)
    for name in E2E_APPS:
        assert wait_until((lab.backup / name / "replica").is_dir, timeout=15), f"{name}: litestream wrote no replica"


def _start_exporter(lab: _Lab) -> None:
    """The exporter looping under busybox sh (with a keys file, as the pod's), its file served by busybox httpd."""
    assert LITESTREAM is not None
    keys = lab.base / "keys.prom"
    keys.write_text(key_metrics(_lab_keys()))
    env = state_exporter_env(
        LITESTREAM,
        apps=" ".join(E2E_APPS),
        backup_root=lab.backup,
        out_file=lab.www / "metrics.prom",
        keys_file=keys,
        interval=EXPORTER_INTERVAL,
        path=str(busybox_bin_dir(lab.base / "busybox-bin")),
    )
    busybox = shutil.which("busybox")
    assert busybox is not None
    lab.stack.enter_context(state_exporter_running([busybox, "sh"], env, lab.base / "exporter.log"))
    assert wait_until((lab.www / "metrics.prom").exists, timeout=10), (lab.base / "exporter.log").read_text()
    conf = lab.base / "httpd.conf"
    httpd = lab.stack.enter_context(busybox_httpd(lab.www, conf, log=lab.base / "httpd.log", port=lab.httpd_port))
    lab.record.content_type = content_type(httpd + EXPORTER_METRICS_PATH)


def _armed(prom: Prometheus) -> bool:
    """Both targets up and LAG seconds of local history: the stall rule compares real data from now on."""
    return (
        set(prom.targets_up().values()) == {"up"}
        and len(prom.query(LOCAL_TXID_LAG_AGO)) == len(E2E_APPS)
        and all(value > 0 for value in _by_app(prom.query(REPLICA_TXID)).values())
    )


def _watch_healthy(prom: Prometheus, record: EndToEnd) -> None:
    """Healthy: writing, replicating; the watched alerts must stay inactive."""
    before = _by_app(prom.query(LOCAL_TXID))
    deadline = time.monotonic() + HEALTHY_SECONDS
    while time.monotonic() < deadline:
        record.healthy_active += [alert for alert in prom.alerts() if alert["labels"]["alertname"] in WATCHED]
        time.sleep(0.2)
    after = _by_app(prom.query(LOCAL_TXID))
    record.healthy_txids = {app: (before.get(app, 0), after.get(app, 0)) for app in E2E_APPS}
    record.healthy_replica_txids = _by_app(prom.query(REPLICA_TXID))


def _break_replicas(lab: _Lab) -> None:
    """Headscale's replica target becomes a regular file; headplane's stays listable but Litestream can no longer
    write it. The writers keep writing."""
    broken = lab.backup / "headscale" / "replica"
    aside = broken.with_name("replica.aside")
    broken.rename(aside)
    broken.write_text("the replica target, replaced by a regular file\n")
    lab.stack.callback(_repair, broken, aside)  # before Litestream stops: it retries a failing shutdown sync for 30 s
    lab.stack.callback(read_only_tree(lab.backup / "headplane" / "replica"))


def _watch_the_break(lab: _Lab, prom: Prometheus) -> None:
    """When each watched alert goes pending (or firing) after the break, and what Litestream made of it."""
    record = lab.record
    broke = time.monotonic()
    expected = {
        ("LitestreamReplicationStalled", "headscale"),
        ("LitestreamReplicaUnreadable", "headscale"),
        ("LitestreamReplicationStalled", "headplane"),
    }
    deadline = broke + max(BOUND_UNREADABLE, BOUND_FROZEN) + 10
    while time.monotonic() < deadline:
        now = time.monotonic() - broke
        for (alert, app), state in prom.alert_states().items():
            if alert in WATCHED and state in ("pending", "firing"):
                record.pending_after.setdefault((alert, app), round(now, 2))
        if expected <= set(record.pending_after) and now > BOUND_UNREADABLE + 1:
            break  # past the time an unreadable headplane replica would have shown
        time.sleep(0.2)
    record.sync_errors = _by_app(prom.query(f'litestream_sync_error_count{{namespace="{NS}"}}'))
    record.monitor_error_logged = "monitor error" in (lab.base / "headscale-litestream.log").read_text()


def _lab_keys() -> list[tuple[str, str, str]]:
    """Two provider-managed keys, far from expiry (the key alerts stay quiet), as ``key_metrics`` takes them."""
    now = datetime.datetime.now(datetime.UTC)
    return [
        ("api", "headplane", (now + datetime.timedelta(days=90)).isoformat()),
        ("preauth", "authkey-0", (now + datetime.timedelta(days=30)).isoformat()),
    ]


def _repair(broken: Path, aside: Path) -> None:
    """Put the moved replica back where the regular file is."""
    broken.unlink(missing_ok=True)
    if aside.is_dir():
        aside.rename(broken)


@pytest.fixture(scope="module")
def end_to_end() -> Iterator[EndToEnd]:
    """Run the scenario once for the module (about 40 s); every process is stopped before the tests assert."""
    base = Path(tempfile.mkdtemp(prefix="alerts-e2e-"))
    base.chmod(0o755)  # the pod's user (Litestream, when the tests run as root) must reach its directories
    record = EndToEnd()
    try:
        started = time.monotonic()
        with ExitStack() as stack:
            _run_end_to_end(base, stack, record)
            stopping = time.monotonic()
        record.phases["stopped"] = round(time.monotonic() - started, 2)
        record.phases["stopping took"] = round(time.monotonic() - stopping, 2)
        yield record
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


E2E = pytest.mark.real_tool("prometheus", "litestream", "busybox")


@E2E
def test_e2e_busybox_httpd_serves_the_metrics_as_prometheus_text(end_to_end: EndToEnd) -> None:
    """busybox strips the spaces of the httpd.conf line; without the line it sends no Content-Type at all."""
    assert end_to_end.content_type == "text/plain;version=0.0.4"


@E2E
def test_e2e_healthy_replication_leaves_the_alerts_inactive(end_to_end: EndToEnd) -> None:
    assert end_to_end.healthy_active == []
    for app, (before, after) in end_to_end.healthy_txids.items():
        assert after > before > 0, f"{app}: the database did not change while healthy"
        assert end_to_end.healthy_replica_txids[app] > 0


@E2E
def test_e2e_a_replica_target_replaced_by_a_file_goes_pending(end_to_end: EndToEnd) -> None:
    seen = end_to_end.pending_after
    for alert in WATCHED:
        assert (alert, "headscale") in seen, f"{alert} never became pending: {seen}"
        assert seen[(alert, "headscale")] <= BOUND_UNREADABLE, seen
    # Litestream itself does not count this as an error (it only logs it): why the exporter exists.
    assert end_to_end.monitor_error_logged
    assert end_to_end.sync_errors.get("headscale") == 0


@E2E
def test_e2e_a_replica_litestream_cannot_write_goes_pending_after_the_lag(end_to_end: EndToEnd) -> None:
    seen = end_to_end.pending_after
    assert ("LitestreamReplicationStalled", "headplane") in seen, seen
    assert EARLIEST_FROZEN <= seen[("LitestreamReplicationStalled", "headplane")] <= BOUND_FROZEN, seen
    assert ("LitestreamReplicaUnreadable", "headplane") not in seen, "a listable replica counted as unreadable"


@E2E
def test_e2e_every_dashboard_query_over_what_the_lab_serves_returns_series(end_to_end: EndToEnd) -> None:
    series = end_to_end.dashboard_series
    assert set(series) == set(dashboard_queries(E2E_DASHBOARD)), "every query ran"
    empty = {title for (title, _), count in series.items() if count == 0}
    assert empty == set(E2E_DASHBOARD_NOT_COVERED), {f"{title}: {expr}": n for (title, expr), n in series.items()}
    counts = {title: n for (title, _), n in series.items()}  # (the panels below have one query each)
    assert counts[f"Transactions the replica lacks ({prom_duration(LAG)} lag)"] == len(E2E_APPS), "one per app"
    assert counts["Time left on provider-managed keys"] == len(_lab_keys()), "one series per key"


@E2E
def test_e2e_timings(end_to_end: EndToEnd) -> None:
    """Not a check: prints what was measured (run with -s)."""
    print(
        json.dumps(
            {
                "lag_seconds": LAG,
                "bound_unreadable": BOUND_UNREADABLE,
                "bound_frozen": BOUND_FROZEN,
                "earliest_frozen": EARLIEST_FROZEN,
                "armed_after": round(end_to_end.armed_after, 2),
                "pending_after_break": {f"{a}/{b}": t for (a, b), t in sorted(end_to_end.pending_after.items())},
                "sync_errors": end_to_end.sync_errors,
                "litestream_ran_as": end_to_end.litestream_user,
                "phases": end_to_end.phases,
            },
            indent=2,
        )
    )
