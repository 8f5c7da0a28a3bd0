"""``promtool test rules`` for every alert both ways, generated from CASES below: cases where it fires and cases
where it does not (threshold edges, the scaled-to-0 guard, another namespace's series, a single transient error).

A firing case is evaluated when its ``for`` has just elapsed (expecting the alert with its exact labels and
annotations) and one evaluation earlier (expecting nothing: still pending); a quiet case is evaluated at every minute
of its window. A test fails when an alert in ALERTS lacks a firing or a quiet case. How a case is written:
tests/support/alert_cases.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from headscale_ha.components.alerts import ALERTS, EXPORTER_JOB, HEADSCALE_JOB, rule_file
from tests.support.alert_cases import (
    KSM,
    Case,
    Fires,
    cnpg,
    cronjob,
    deploy,
    exported,
    exporter_up,
    key,
    litestream,
    merge,
    rule_tests,
    rules_by_alert,
    s,
    sts,
)
from tests.support.alert_scopes import NS, ROUTERS_NS, SCOPES
from tests.support.prometheus_lab import needs_prometheus, run_rule_tests

OTHER = "other"

HS, HP = "headscale", "headplane"
RECORDER = {"namespace": NS, "container": "position-recorder", **KSM}
HS_RR, HP_RR = "headscale-restore-rehearsal", "headplane-restore-rehearsal"
TWO_DAYS = 172800
OVERDUE = 336 * 3600

CASES: list[Case] = [
    # --- readiness -----------------------------------------------------------------------------------------------
    Case(
        "HeadscaleNotReady",
        "the pod stops being ready",
        deploy(NS, HS, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HS}, 0),),
        since=3,
    ),
    Case(
        "HeadscaleNotReady",
        "a standby still alerts when Headscale runs there and is not ready",
        deploy(NS, HS, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HS}, 0),),
        since=3,
        scope="standby",
    ),
    Case("HeadscaleNotReady", "standby: scaled to 0", deploy(NS, HS, "0x120", "0x120"), scope="standby"),
    Case(
        "HeadscaleNotReady",
        "another namespace's Headscale is not ready",
        merge(deploy(OTHER, HS, "1x120", "0x120"), deploy(NS, HS, "1x120", "1x120")),
    ),
    Case("HeadscaleNotReady", "not ready for 4 minutes only", deploy(NS, HS, "1x120", "1 1 1 0 0 0 0 1x113")),
    Case(
        "HeadplaneNotReady",
        "the pod stops being ready",
        deploy(NS, HP, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HP}, 0),),
        since=3,
    ),
    Case("HeadplaneNotReady", "scaled to 0", deploy(NS, HP, "0x120", "0x120"), scope="standby"),
    Case(
        "HeadplaneNotReady",
        "another namespace's Headplane is not ready",
        merge(deploy(OTHER, HP, "1x120", "0x120"), deploy(NS, HP, "2x120", "2x120")),
    ),
    Case(
        "HeadscaleMetricsDown",
        "the target goes down",
        {s("up", namespace=NS, job=HEADSCALE_JOB, pod="headscale-0", instance="10.0.0.5:9090"): "1 1 1 0x117"},
        (Fires({"namespace": NS, "job": HEADSCALE_JOB}),),
        since=3,
    ),
    Case(
        "HeadscaleMetricsDown",
        "no target while Headscale runs (absent)",
        deploy(NS, HS, "1x120", "1x120"),
        (Fires({"namespace": NS, "job": HEADSCALE_JOB}),),
        since=0,
    ),
    Case("HeadscaleMetricsDown", "no target, Headscale scaled to 0", deploy(NS, HS, "0x120", "0x120")),
    Case(
        "HeadscaleMetricsDown",
        "another namespace's target is down",
        {
            s("up", namespace=OTHER, job=HEADSCALE_JOB, pod="headscale-0"): "0x120",
            s("up", namespace=NS, job=HEADSCALE_JOB, pod="headscale-0"): "1x120",
        },
    ),
    Case(
        "SubnetRoutersDegraded",
        "one of three routers stops being ready",
        merge(
            sts(ROUTERS_NS, "subnet-router-0", "1x120", "1x120"),
            sts(ROUTERS_NS, "subnet-router-1", "1x120", "1 1 1 0x117"),
        ),
        (Fires({"namespace": ROUTERS_NS, "statefulset": "subnet-router-1"}, 0),),
        since=3,
    ),
    Case("SubnetRoutersDegraded", "scaled to 0", sts(ROUTERS_NS, "subnet-router-0", "0x120", "0x120")),
    Case(
        "SubnetRoutersDegraded",
        "a degraded set in the applications' namespace, not the routers'",
        merge(sts(NS, "subnet-router-0", "1x120", "0x120"), sts(ROUTERS_NS, "subnet-router-0", "1x120", "1x120")),
    ),
    Case(
        "SubnetRoutersDegraded",
        "a StatefulSet that is not one of the routers",
        sts(ROUTERS_NS, "subnet-router-old", "1x120", "0x120"),
    ),
    # --- replication ---------------------------------------------------------------------------------------------
    # The default lag is 5 minutes: local(t - 5m) > replica(t). local = 100 + t.
    Case(
        "LitestreamReplicationStalled",
        "the replica freezes at 110 while the database advances",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "100+1x10 110x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 116),),
        since=16,
    ),
    Case(
        "LitestreamReplicationStalled",
        "the replica becomes unreadable (txid 0)",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "100+1x10 0x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 111),),
        since=11,
    ),
    Case(
        "LitestreamReplicationStalled",
        "busy and healthy: the replica 2 minutes behind",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "98+1x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "edge: the replica exactly the lag behind",
        merge(
            litestream("litestream_txid", NS, HP, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "95+1x120", app=HP),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "idle database",
        merge(
            litestream("litestream_txid", NS, HS, "100x120"),
            exported("headscale_ha_replica_txid", NS, "100x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "another namespace stalls",
        merge(
            litestream("litestream_txid", OTHER, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", OTHER, "100x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "standby: no Litestream running, the replica does not move",
        exported("headscale_ha_replica_txid", NS, "100x120", app=HS),
        until=60,
        scope="standby",
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "the exporter can no longer list the replica",
        merge(
            exported("headscale_ha_replica_up", NS, "1 1 1 0x117", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HP),
            exporter_up(NS, "1x120"),
        ),
        (Fires({"namespace": NS, "app": HS}),),
        since=3,
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "the exporter runs but does not report an application (absent)",
        merge(exported("headscale_ha_replica_up", NS, "1x120", app=HP), exporter_up(NS, "1x120")),
        (Fires({"namespace": NS, "app": HS}),),
        since=0,
    ),
    Case("LitestreamReplicaUnreadable", "the exporter is down (StateExporterDown's)", exporter_up(NS, "0x120")),
    Case(
        "LitestreamReplicaUnreadable",
        "another namespace's replica is unreadable",
        merge(
            exported("headscale_ha_replica_up", OTHER, "0x120", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HP),
            exporter_up(NS, "1x120"),
        ),
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "postgres stage: Headscale's replica is not watched",
        merge(exported("headscale_ha_replica_up", NS, "1x120", app=HP), exporter_up(NS, "1x120")),
        scope="postgres-stage",
    ),
    Case(
        "LitestreamSyncErrors",
        "an error every minute",
        litestream("litestream_sync_error_count", NS, HP, "0 0 0 1+1x117"),
        (Fires({"namespace": NS, "app": HP}),),
        since=3,
    ),
    Case("LitestreamSyncErrors", "a single error", litestream("litestream_sync_error_count", NS, HP, "0 0 0 1x117")),
    Case(
        "LitestreamSyncErrors",
        "errors of another namespace and of a container that is not Litestream",
        merge(
            litestream("litestream_sync_error_count", OTHER, HP, "0+1x120"),
            litestream("litestream_sync_error_count", NS, HP, "0+1x120", container="headplane"),
        ),
    ),
    Case(
        "LitestreamDiskFull",
        "the local disk fills up",
        litestream("litestream_disk_full", NS, HS, "0 0 0 1x117"),
        (Fires({"namespace": NS, "app": HS}),),
        since=3,
    ),
    Case(
        "LitestreamDiskFull",
        "another namespace's disk is full",
        merge(
            litestream("litestream_disk_full", NS, HS, "0x120"), litestream("litestream_disk_full", OTHER, HS, "1x120")
        ),
    ),
    Case(
        "LitestreamMetricsAbsent",
        "Headscale runs without Litestream metrics (absent)",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
        (Fires({"namespace": NS, "container": "litestream", "app": HS}),),
        since=0,
    ),
    Case(
        "LitestreamMetricsAbsent",
        "another namespace's Litestream metrics do not count",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
            litestream("litestream_txid", OTHER, HS, "5x120"),
        ),
        (Fires({"namespace": NS, "container": "litestream", "app": HS}),),
        since=0,
    ),
    Case(
        "LitestreamMetricsAbsent",
        "Headscale scaled to 0",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
    ),
    Case(
        "LitestreamMetricsAbsent",
        "both present",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HS, "5x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
    ),
    # The signer re-signs at least every 60 s while the application runs; stale above 600 s. promtool's time() is
    # the evaluation's minute * 60, so "0+60x120" is a signature as fresh as the clock.
    Case(
        "BackupSignatureStale",
        "the signed timestamp stops advancing at 10m while Headscale is ready",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x10 600x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 1260),),
        since=21,
    ),
    Case(
        "BackupSignatureStale",
        "no manifest (0) while Headplane runs",
        merge(
            deploy(NS, HP, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HP),
        ),
        (Fires({"namespace": NS, "app": HP}, 1260),),
        since=11,
    ),
    Case(
        "BackupSignatureStale",
        "the signed timestamp advances, a heartbeat behind the clock",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "-60+60x120", app=HP),
        ),
        until=60,
    ),
    Case(
        "BackupSignatureStale",
        "edge: exactly 600 s old all along",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "-600+60x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "BackupSignatureStale",
        "standby: 0 ready replicas, the signature frozen or absent",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "0x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "600x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HP),
        ),
        until=60,
        scope="standby",
    ),
    Case(
        "BackupUnsignedFiles",
        "a refused file stays 10 minutes",
        merge(
            exported("headscale_ha_replica_unsigned_files", NS, "0x10 1x110", app=HS),
            exported("headscale_ha_replica_unsigned_files", NS, "0x120", app=HP),
        ),
        (Fires({"namespace": NS, "app": HS}, 1),),
        since=11,
    ),
    Case(
        "BackupUnsignedFiles",
        "the tail before the next signature, a proof of a few seconds, another namespace",
        merge(
            exported("headscale_ha_replica_unsigned_files", NS, "0 2 0 1 0 0 3 0x113", app=HS),
            exported("headscale_ha_replica_unsigned_files", OTHER, "1x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "BackupSignatureStale",
        "a stale signature of an application that does not run, and of another namespace",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "1x120"),
            deploy(OTHER, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x120", app=HP),
            exported("headscale_ha_replica_signed_timestamp_seconds", OTHER, "0x120", app=HS),
        ),
        until=60,
    ),
    # --- restore -------------------------------------------------------------------------------------------------
    Case(
        "RestoreRefused",
        "the restore init container crash-loops",
        {
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-5f7d9-x2x4q",
                container="restore",
                reason="CrashLoopBackOff",
                **KSM,
            ): "_ _ _ 1x117"
        },
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "restore"}),),
        since=3,
    ),
    Case(
        "RestoreRefused",
        "the pre-upgrade init container restarted twice within 15 minutes",
        {
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=NS,
                pod="headscale-5f7d9-x2x4q",
                container="pre-upgrade",
                **KSM,
            ): "0 0 0 1 1 1 2x114"
        },
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "pre-upgrade"}),),
        since=6,
    ),
    Case(
        "RestoreRefused",
        "one failed try, then success",
        {
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=NS,
                pod="headplane-7c4-abcde",
                container="restore",
                **KSM,
            ): "0 0 0 1x117"
        },
    ),
    Case(
        "RestoreRefused",
        "other containers, reasons and namespaces",
        {
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-migrate-x",
                container="schema",
                reason="CrashLoopBackOff",
            ): "1x120",
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=OTHER,
                pod="headscale-1",
                container="restore",
                reason="CrashLoopBackOff",
            ): "1x120",
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-2",
                container="restore",
                reason="ContainerCreating",
            ): "1x120",
        },
    ),
    Case(
        "PositionNotRecorded",
        "the recorder exited 4 (two minutes without a record) and was restarted",
        {s("kube_pod_init_container_status_restarts_total", pod="headscale-5f7d9-x2x4q", **RECORDER): "0 0 0 1x117"},
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "position-recorder"}),),
        since=3,
    ),
    Case(
        "PositionNotRecorded",
        "the recorder crash-loops",
        {
            s(
                "kube_pod_init_container_status_waiting_reason",
                pod="headscale-5f7d9-x2x4q",
                reason="CrashLoopBackOff",
                **RECORDER,
            ): "_ _ 1x118"
        },
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "position-recorder"}),),
        since=2,
    ),
    Case(
        "PositionNotRecorded",
        "recording, other containers restarting, another namespace",
        {
            s("kube_pod_init_container_status_restarts_total", pod="headscale-5f7d9-x2x4q", **RECORDER): "0x120",
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=NS,
                pod="headscale-5f7d9-x2x4q",
                container="litestream",
            ): "0 0 1 2 3x117",
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=OTHER,
                pod="headscale-1",
                container="position-recorder",
            ): "0 0 1 2 3x117",
        },
    ),
    # --- the exporter --------------------------------------------------------------------------------------------
    Case(
        "StateExporterDown",
        "the target goes down",
        merge(
            exporter_up(NS, "1 1 1 0x117"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0+60x120")
        ),
        (Fires({"namespace": NS, "job": EXPORTER_JOB}),),
        since=3,
    ),
    Case("StateExporterDown", "never scraped (absent)", {}, (Fires({"namespace": NS, "job": EXPORTER_JOB}),), since=0),
    Case(
        "StateExporterDown",
        "the loop hangs: last round older than 5 minutes",
        merge(exporter_up(NS, "1x120"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0x120")),
        (Fires({"namespace": NS, "job": EXPORTER_JOB}),),
        since=6,
    ),
    Case(
        "StateExporterDown",
        "edge: last round exactly 5 minutes old",
        merge(
            exporter_up(NS, "1x120"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "-300+60x120")
        ),
    ),
    Case(
        "StateExporterDown",
        "another namespace's exporter is down",
        merge(
            exporter_up(OTHER, "0x120"),
            exporter_up(NS, "1x120"),
            exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0+60x120"),
        ),
    ),
    # --- rehearsal -----------------------------------------------------------------------------------------------
    Case(
        "RestoreRehearsalFailed",
        "the last run failed",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x120"),
            cronjob("status_last_successful_time", NS, HS, "500x120"),
            cronjob("status_last_schedule_time", NS, HP, "1000x120"),
            cronjob("status_last_successful_time", NS, HP, "1030x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}, 1000),),
        since=0,
    ),
    Case(
        "RestoreRehearsalFailed",
        "never succeeded",
        cronjob("status_last_schedule_time", NS, HP, "1000x120"),
        (Fires({"namespace": NS, "cronjob": HP_RR}, 1000),),
        since=0,
    ),
    Case(
        "RestoreRehearsalFailed",
        "edge: success at the schedule time",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x120"),
            cronjob("status_last_successful_time", NS, HS, "1000x120"),
        ),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "a run in progress for 10 minutes, then success",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x4 2000x115"),
            cronjob("status_last_successful_time", NS, HS, "1030x14 2030x105"),
        ),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "another namespace's rehearsal failed",
        cronjob("status_last_schedule_time", OTHER, HS, "1000x120"),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "postgres stage: no Headscale rehearsal is expected",
        cronjob("status_last_schedule_time", NS, HS, "1000x120"),
        until=40,
        scope="postgres-stage",
    ),
    Case(
        "RestoreRehearsalMissing",
        "the last success is more than 2 days old",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, f"-{TWO_DAYS}x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}),),
        since=1,
    ),
    Case(
        "RestoreRehearsalMissing",
        "created more than 2 days ago, never succeeded",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, "0+60x120"),
            cronjob("created", NS, HP, f"-{TWO_DAYS}x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HP_RR}),),
        since=1,
    ),
    Case(
        "RestoreRehearsalMissing",
        "the CronJob does not exist (absent)",
        merge(
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}),),
        since=0,
    ),
    Case(
        "RestoreRehearsalMissing",
        "edge: the last success exactly 2 days old",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, f"-{TWO_DAYS}+60x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        until=60,
    ),
    Case(
        "RestoreRehearsalMissing",
        "created recently, not run yet",
        merge(
            cronjob("created", NS, HS, "-1000x120"),
            cronjob("created", NS, HP, "-1000x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        until=60,
    ),
    Case(
        "RestoreRehearsalMissing",
        "no kube-state-metrics series in the namespace, another namespace's rehearsal is old",
        cronjob("status_last_successful_time", OTHER, HS, f"-{TWO_DAYS}x120"),
        until=60,
    ),
    # --- postgres, certificates, keys ----------------------------------------------------------------------------
    Case(
        "CNPGArchivingFailing",
        "the primary fails to archive; the replica (in recovery) does not count",
        merge(
            cnpg(NS, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
            cnpg(NS, "headscale-db-2", since="0+60x120", failed="0+1x120", recovery="1x120"),
        ),
        (Fires({"namespace": NS, "pod": "headscale-db-1"}, 1260),),
        since=11,
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "idle: nothing archived for an hour, no failure",
        cnpg(NS, "headscale-db-1", since="3600+60x120", failed="3x120", recovery="0x120"),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "failures, but archiving recovers at once",
        cnpg(NS, "headscale-db-1", since="30x120", failed="0+1x120", recovery="0x120"),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "another cluster's pod and another namespace",
        merge(
            cnpg(NS, "other-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
            cnpg(OTHER, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
        ),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "sqlite stage: no CNPG rule",
        cnpg(NS, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
    ),
    Case(
        "CertificateExpiringSoon",
        "14 days and 30 minutes left at 0m",
        {s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): "1211400x200"},
        (Fires({"namespace": NS, "name": "headscale-tls"}, 1211400 - 91 * 60),),
        since=31,
    ),
    Case(
        "CertificateExpiringSoon",
        "edge: exactly 14 days left all along",
        {
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): (
                "1209600+60x200"
            )
        },
        until=100,
    ),
    Case(
        "CertificateExpiringSoon",
        "another Certificate, another namespace",
        {
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="other-tls"): "0x200",
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=OTHER, name="headscale-tls"): "0x200",
        },
    ),
    Case(
        "CertificateExpiringSoon",
        "standby: no Certificate configured",
        {s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): "0x200"},
        scope="standby",
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "inside the rotate-before window for an hour",
        key(NS, "api", "headplane", f"{OVERDUE + 1800}x200"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, OVERDUE + 1800 - 91 * 60),),
        since=31,
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "edge: exactly at the window's start; and an expired router pre-auth key",
        merge(
            key(NS, "api", "headplane", f"{OVERDUE}+60x200"),
            key(NS, "preauth", "router-0", "0x200", user="tailnet-routers"),
        ),
        until=100,
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "standby: the serving stack owns the key",
        key(NS, "api", "headplane", "0x200"),
        scope="standby",
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "3 days and 5 minutes left at 0m",
        key(NS, "api", "headplane", "259500x120"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, 259500 - 16 * 60),),
        since=6,
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "already expired",
        key(NS, "api", "headplane", "0x120"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, -600),),
        since=0,
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "pre-auth keys expire by design; the API key exactly 3 days from expiry; another namespace",
        merge(
            key(NS, "preauth", "router-0", "0x120", user="tailnet-routers"),
            key(NS, "api", "headplane", "259200+60x120"),
            key(OTHER, "api", "headplane", "0x120"),
        ),
        until=60,
    ),
]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing = {case.alert for case in CASES if case.fires}
    quiet = {case.alert for case in CASES if not case.fires}
    assert not set(ALERTS) - firing, f"alerts without a firing case: {sorted(set(ALERTS) - firing)}"
    assert not set(ALERTS) - quiet, f"alerts without a quiet case: {sorted(set(ALERTS) - quiet)}"
    assert {case.alert for case in CASES} <= set(ALERTS)
    assert {case.scope for case in CASES} <= set(SCOPES)
    for case in CASES:
        if case.fires:  # an alert that fires where it is not rendered would be a broken case
            assert case.alert in rules_by_alert(SCOPES[case.scope]), case


@needs_prometheus
@pytest.mark.parametrize("scope_name", sorted({case.scope for case in CASES}))
def test_promtool_unit_tests(scope_name: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(rule_file(SCOPES[scope_name]))
    tests = tmp_path / "tests.yml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": rule_tests(CASES, scope_name)},
            sort_keys=False,
            width=1000,
        )
    )
    result = run_rule_tests(tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
