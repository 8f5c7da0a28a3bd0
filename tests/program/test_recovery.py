"""The recovery model: every figure traced to the rendered pods, the measurement, or a stated input."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.settings import LitestreamSettings
from headscale_ha.guardrails.images import ImageRef
from headscale_ha.program.recovery import (
    FORCE_DETACH_SECONDS,
    LITESTREAM_MONITOR_SECONDS,
    MEASURED_FILE,
    MeasurementError,
    load_promotion_figures,
    load_restore_figures,
)
from tests.support.litestream_lab import (
    App,
    litestream_bin,
    replica_row_count,
    write_then_stop,
)
from tests.support.stack_snippets import POSTGRES
from tools.harness import PROJECT_DIR


def _failures(run, app: str = "headscale") -> dict[str, dict]:
    model = run.outputs["recovery"]["applications"][app]
    assert model["modelled"] is True
    return {row["failure"]: row for row in model["failures"]}


def _with_backup(project: Path, **backup: object) -> Path:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"].update(backup)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def _pod(run, app: str) -> dict:
    (deployment,) = [o for o in run.kubernetes_objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == app]
    return deployment["spec"]["template"]["spec"]


def test_node_loss_on_disposable_storage_is_detection_pull_restore_and_start(run_stack) -> None:
    run = run_stack("hydra")
    figures = load_restore_figures()
    pod = _pod(run, "headscale")
    (unreachable,) = [t for t in pod["tolerations"] if t["key"] == "node.kubernetes.io/unreachable"]
    (restore,) = [c for c in pod["initContainers"] if c["name"] == "restore"]
    node = _failures(run)["nodeLoss"]
    stated = run.outputs["recovery"]["inputs"]["stated"]
    assert node["steps"]["detection"] == stated["nodeMonitorGraceSeconds"] + unreachable["tolerationSeconds"]
    assert node["steps"]["volumeDetach"] == 0, "an emptyDir is never attached elsewhere"
    megabytes = quantity_value(stated["headscaleDatabaseSize"]) / 1e6
    limit = quantity_value(restore["resources"]["limits"]["cpu"])
    expected = megabytes * max(figures.wall_seconds_per_mb, figures.cpu_seconds_per_mb / limit)
    assert node["steps"]["restore"] == pytest.approx(expected, abs=0.1)
    assert node["rtoSeconds"] == pytest.approx(sum(node["steps"].values()), abs=0.1)
    # What a commit that never reached the replica can be: one sync interval plus Litestream's monitor tick.
    assert node["rpoSeconds"] == 1 + LITESTREAM_MONITOR_SECONDS


def test_the_model_follows_the_rendered_tolerations_and_the_restore_limit(run_stack, lab_project) -> None:
    project = lab_project()
    stack = project / "Pulumi.lab.yaml"
    stack.write_text(stack.read_text().replace("nodes: 3,", "nodes: 3, tolerationSeconds: 20,"))
    _with_backup(
        project,
        litestream={
            "image": "docker.io/litestream/litestream:0.5.17",
            "restoreResources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "200m", "memory": "256Mi"},
            },
        },
    )
    run = run_stack("lab", project_dir=project)
    node = _failures(run)["nodeLoss"]
    assert node["steps"]["detection"] == 40 + 20
    figures = load_restore_figures()
    megabytes = quantity_value("64Mi") / 1e6
    assert node["steps"]["restore"] == pytest.approx(megabytes * figures.cpu_seconds_per_mb / 0.2, abs=0.1)
    default = _failures(run_stack("hydra"))["nodeLoss"]["steps"]["restore"]
    assert node["steps"]["restore"] > 3 * default, "the sidecar's 200m limit makes the restore several times slower"


def test_persistent_storage_waits_for_the_force_detach_and_loses_nothing(run_stack, project_copy) -> None:
    run = run_stack("hydra", project_dir=_with_backup(project_copy(), local={"storage": "persistent"}))
    rows = _failures(run)
    assert rows["nodeLoss"]["steps"]["volumeDetach"] == FORCE_DETACH_SECONDS
    assert "restore" not in rows["nodeLoss"]["steps"]
    assert rows["nodeLoss"]["rpoSeconds"] == 0
    assert rows["nfsLossThenPodReplaced"]["rtoSeconds"] is not None, "the claim still holds the database"
    disposable = _failures(run_stack("hydra"))
    assert disposable["nodeLoss"]["rtoSeconds"] < rows["nodeLoss"]["rtoSeconds"], "why disposable is the default"
    assert disposable["nfsLossThenPodReplaced"]["rtoSeconds"] is None
    assert disposable["nfsLossThenPodReplaced"]["until"] == "the NFS export is back"


def test_a_single_node_site_loses_its_node_as_a_whole_site(run_stack) -> None:
    run = run_stack("cosmos")
    recovery = run.outputs["recovery"]
    assert recovery["serving"] is False
    node = _failures(run)["nodeLoss"]
    assert node["rtoSeconds"] is None
    assert node["until"] == "the node returns"


def test_the_cluster_loss_row_adds_the_decision_the_measured_command_the_restore_and_dns(run_stack) -> None:
    """The promotion is a human's decision (stated) plus `make promote` with the active lost (measured by
    bench/promotion.py), then the rollout it awaits (pull, restore, start) and the DNS TTL."""
    run = run_stack("hydra")
    cluster = _failures(run)["clusterLoss"]
    inputs = run.outputs["recovery"]["inputs"]
    measured = json.loads((PROJECT_DIR / "bench" / "measured" / "promotion.json").read_text())
    command = measured["lost"]["commandSeconds"] + measured["lost"]["waitSeconds"]
    assert cluster["steps"]["decision"] == inputs["stated"]["promotionSeconds"] == 600
    assert cluster["steps"]["promoteCommand"] == pytest.approx(command, abs=0.1)
    assert inputs["measured"]["promotion"]["promoteActiveLostSeconds"] == command
    assert cluster["steps"]["dnsTtl"] == inputs["rendered"]["dnsTtlSeconds"] == 60
    assert cluster["rtoSeconds"] == pytest.approx(sum(cluster["steps"].values()), abs=0.1 * len(cluster["steps"]))
    assert "make promote SITE=<standby> LOST=<active>" in cluster["how"]


def test_missing_promotion_figures_name_the_bench_that_records_them(tmp_path) -> None:
    with pytest.raises(MeasurementError, match=r"run `python -m bench\.promotion --record`"):
        load_promotion_figures(tmp_path / "promotion.json")


def test_headscale_on_postgres_is_not_modelled_as_a_restore(run_stack, lab_project) -> None:
    run = run_stack("lab", project_dir=lab_project(POSTGRES))
    applications = run.outputs["recovery"]["applications"]
    assert applications["headscale"]["modelled"] is False
    assert "CloudNativePG" in applications["headscale"]["why"]
    assert applications["headplane"]["modelled"] is True


def test_the_measurement_matches_the_litestream_the_program_renders() -> None:
    figures = load_restore_figures()
    assert figures.litestream == ImageRef.parse(LitestreamSettings().image).tag, (
        "bench/measured/restore.json was measured with another Litestream than the image the pods run: "
        "re-run `python -m bench.restore --record`"
    )
    assert 0 < figures.wall_seconds_per_mb < 1
    assert figures.cpu_seconds_per_mb > 0
    assert figures.kill_lost_seconds_max <= 1 + LITESTREAM_MONITOR_SECONDS + 0.5


def test_a_missing_measurement_names_the_file_and_the_command(tmp_path: Path) -> None:
    with pytest.raises(MeasurementError, match=r"restore\.json.*python -m bench\.restore --record"):
        load_restore_figures(tmp_path / "restore.json")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"litestream": "0.5.17"}))
    with pytest.raises(MeasurementError, match="missing or malformed"):
        load_restore_figures(broken)
    assert MEASURED_FILE.is_file()


@pytest.mark.real_tool("litestream")
def test_a_graceful_stop_loses_nothing_and_a_kill_at_most_the_tail(tmp_path: Path) -> None:
    """The model's podReplaced RPO (0) and nodeLoss RPO (sync + monitor tick), with the real binary."""
    binary = litestream_bin()
    assert binary is not None
    for mode in ("term", "kill"):
        app = App(tmp_path / mode, sync_interval="1s").create()
        stop = signal.SIGTERM if mode == "term" else signal.SIGKILL
        writer, stopped_at = write_then_stop(binary, app, stop=stop, write_for=2.5)
        restored = replica_row_count(binary, app, tmp_path / f"{mode}-scratch")
        committed = writer.committed
        if mode == "term":
            assert restored == len(committed), "SIGTERM ships the tail before litestream exits"
        else:
            lost = committed[restored:]
            assert not lost or stopped_at - lost[0][1] <= 1 + LITESTREAM_MONITOR_SECONDS + 0.5
