"""The availability report: its words follow the config, and every figure in it is the `recovery` output's."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.settings import (
    DatabaseStage,
    FailoverMode,
    LocalStorage,
    Nfs,
    ObjectStore,
    OidcSettings,
    PolicyMode,
    Role,
    RouteKind,
    VolSyncSettings,
)
from headscale_ha.program.availability import availability_output, availability_report
from headscale_ha.program.availability.figures import recovery_rows
from headscale_ha.program.availability.page import render_markdown, table_cell
from headscale_ha.program.availability.phrases import SOURCE
from headscale_ha.program.config import StackConfig
from tests.support.stack_snippets import POSTGRES
from tools.availability_docs import stack_config
from tools.harness import PROJECT_DIR, ProgramRun


def _report(run_stack, stack: str = "hydra", project_dir: Path = PROJECT_DIR) -> tuple[dict[str, Any], ProgramRun]:
    run = run_stack(stack, project_dir=project_dir)
    return availability_report(stack_config(stack, project_dir), run.exports["recovery"]), run


def _row(report: dict[str, Any], component: str) -> dict[str, str]:
    (row,) = [r for r in report["redundancy"] if r["component"].startswith(component)]
    return row


def _scenario(report: dict[str, Any], start: str) -> dict[str, Any]:
    (row,) = [r for r in report["failures"] if r["scenario"].startswith(start)]
    return row


def _texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return [value] if isinstance(value, str) else []


def _numbers(value: Any) -> set[float]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int | float):
        return {float(value)}
    if isinstance(value, dict):
        return {n for item in value.values() for n in _numbers(item)}
    if isinstance(value, list):
        return {n for item in value for n in _numbers(item)}
    return set()


def _with_project_value(project: Path, key: str, **values: Any) -> Path:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"][key]["value"].update(values)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def test_hydra_says_its_routers_survive_one_node_and_the_rendered_objects_agree(run_stack) -> None:
    report, run = _report(run_stack, "hydra")
    assert report["serving"] is True
    assert report["classification"].startswith("not continuously highly available: restart-and-restore singletons")
    assert "subnet routes survive the loss of one node (2 routers on 3 nodes" in report["classification"]
    routers = _row(report, "Subnet routers")
    assert routers["layout"].startswith("2 StatefulSet pods, one per node")
    keeps = _scenario(report, "A node running only a subnet router")["whatKeepsWorking"]
    assert "the other router(s) advertise the same prefixes" in keeps
    # What the report says about budgets is what the stack renders.
    budgets = {o["metadata"]["name"] for o in _objects(run, "PodDisruptionBudget")}
    assert budgets == {"subnet-router", "tailnet-gateway"}
    assert "PodDisruptionBudget" in _row(report, "Gateway services")["layout"]
    drain = next(r for r in report["maintenance"] if r["activity"] == "Draining a node")["effect"]
    assert "Headscale and Headplane have no PodDisruptionBudget" in drain
    assert _row(report, "Standby site")["layout"] == "`cosmos` (standby)"


def test_cosmos_is_a_standby_whose_single_node_is_the_single_point_of_failure(run_stack) -> None:
    report, run = _report(run_stack, "cosmos")
    assert report["serving"] is False
    assert report["classification"].startswith("standby, not serving")
    assert "the single node is the single point of failure" in report["classification"]
    (headscale,) = [o for o in _objects(run, "Deployment") if o["metadata"]["name"] == "headscale"]
    assert headscale["spec"]["replicas"] == 0
    assert _row(report, "Headscale")["layout"].startswith("0 replicas (standby")
    assert any(limit.startswith("Single node:") for limit in report["limits"])
    scenarios = [r["scenario"] for r in report["failures"]]
    assert not any(s.startswith("A node running only") for s in scenarios), "no other node to lose"
    own = _scenario(report, "This site (its only node)")
    assert "the whole control plane" in own["whatKeepsWorking"]
    promoted = _scenario(report, "Once promoted: the node")
    assert promoted["figures"]["headscale"]["until"] == "the node returns"
    assert not any(
        r["component"].startswith("Subnet routers") and "PodDisruptionBudget" in r["layout"]
        for r in report["redundancy"]
    )
    assert _objects(run, "PodDisruptionBudget") == []


@pytest.mark.parametrize("instances", [3, 1])
def test_the_postgres_stage_changes_the_database_row_and_the_classification(
    instances: int, run_stack, lab_project
) -> None:
    project = lab_project(POSTGRES.replace("instances: 3", f"instances: {instances}"))
    report, run = _report(run_stack, "lab", project)
    assert report["stage"] == "postgres"
    databases = _row(report, "Databases")
    assert databases["layout"].startswith(f"CloudNativePG cluster of {instances} instance(s)")
    classification = report["classification"]
    assert "Headscale is one restart-only process" in classification
    if instances > 1:
        assert f"its database is replicated ({instances} CloudNativePG instances" in classification
        assert "required anti-affinity" in databases["layout"]
        assert "promotes one when the primary fails" in databases["mechanism"]
    else:
        assert "single CloudNativePG instance (no database failover)" in classification
        assert any(limit.startswith("Single PostgreSQL instance") for limit in report["limits"])
    # Headscale on PostgreSQL has no `recovery` rows: the report says so instead of inventing a figure.
    node = _scenario(report, "The node running Headscale")
    assert "headscale" not in node["figures"]
    assert "Headscale not modelled" in node["rto"]
    assert (
        node["figures"]["headplane"]["rtoSeconds"]
        == recovery_rows(run.exports["recovery"], "nodeLoss")["headplane"]["rtoSeconds"]
    )
    # "enablePDB not rendered, so on by default": true of the rendered Cluster.
    (cluster,) = _objects(run, "Cluster")
    assert "enablePDB" not in cluster["spec"]
    assert cluster["spec"]["instances"] == instances


def test_disposable_and_persistent_storage_tell_a_different_node_loss(run_stack, project_copy) -> None:
    disposable, disposable_run = _report(run_stack, "hydra")
    project = _with_project_value(project_copy(), "backup", local={"storage": "persistent"})
    persistent, persistent_run = _report(run_stack, "hydra", project)
    lost = _scenario(disposable, "The node running Headscale")
    kept = _scenario(persistent, "The node running Headscale")
    assert "restores from the replica" in lost["whatStops"]
    assert "commits not yet shipped die with the node" in lost["whatStops"]
    forced = persistent_run.exports["recovery"]["inputs"]["facts"]["forceDetachSeconds"]
    assert f"forced off the dead node ({forced:g} s)" in kept["whatStops"]
    assert "Nothing is lost" in kept["whatStops"]
    for report, run in ((lost, disposable_run), (kept, persistent_run)):
        rows = recovery_rows(run.exports["recovery"], "nodeLoss")
        assert report["figures"]["headscale"]["rtoSeconds"] == rows["headscale"]["rtoSeconds"]
        assert report["figures"]["headscale"]["rpoSeconds"] == rows["headscale"]["rpoSeconds"]
    assert kept["figures"]["headscale"]["rpoSeconds"] == 0
    assert lost["figures"]["headscale"]["rpoSeconds"] > 0
    assert any(limit.startswith("No fencing") for limit in disposable["limits"])
    assert not any(limit.startswith("No fencing") for limit in persistent["limits"])
    assert any(limit.startswith("Persistent storage pins") for limit in persistent["limits"])


def test_the_figures_follow_the_recovery_output(run_stack, project_copy) -> None:
    before, _ = _report(run_stack, "hydra")
    project = project_copy()
    stack_file = project / "Pulumi.hydra.yaml"
    stack_file.write_text(stack_file.read_text() + "  headscale-ha:recovery:\n    imagePullSeconds: 77\n")
    after, run = _report(run_stack, "hydra", project)
    assert run.exports["recovery"]["inputs"]["stated"]["imagePullSeconds"] == 77
    old, new = _scenario(before, "The node running Headscale"), _scenario(after, "The node running Headscale")
    assert new["figures"]["headscale"]["rtoSeconds"] == old["figures"]["headscale"]["rtoSeconds"] + 47
    expected = recovery_rows(run.exports["recovery"], "nodeLoss")["headscale"]["rtoSeconds"]
    assert f"Headscale {expected:g} s" in new["rto"]
    upgrade = after["maintenance"][0]["effect"]
    replaced = recovery_rows(run.exports["recovery"], "podReplaced")["headscale"]["rtoSeconds"]
    assert f"about {replaced:g} s" in upgrade


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_no_figure_is_written_by_hand(stack: str, run_stack) -> None:
    """Every scenario's figures are its `recovery` rows; every number of seconds in the text is one of that
    output's numbers (or the config's DNS TTL)."""
    report, run = _report(run_stack, stack)
    recovery = run.exports["recovery"]
    for scenario in report["failures"]:
        if scenario["recovery"] is None:
            assert scenario["figures"] == {}
            continue
        rows = recovery_rows(recovery, scenario["recovery"])
        assert scenario["figures"], scenario["scenario"]
        for app, figures in scenario["figures"].items():
            assert figures == {k: rows[app][k] for k in ("rtoSeconds", "until", "rpoSeconds", "rpoLost")}
    allowed = _numbers(recovery) | {float(stack_config(stack).endpoint.ttl)}
    seconds = {float(n) for text in _texts(report) for n in re.findall(r"(\d+(?:\.\d+)?) s\b", text)}
    assert seconds, "the report quotes figures"
    assert seconds <= allowed, f"numbers not from `recovery`: {sorted(seconds - allowed)}"


def test_the_endpoint_row_follows_the_failover_mode(run_stack, project_copy) -> None:
    none, _ = _report(run_stack, "hydra")
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text().replace("failover: none", "failover: k8gb")
    (project / "Pulumi.yaml").write_text(text)
    k8gb, run = _report(run_stack, "hydra", project)
    assert len(_objects(run, "Gslb")) == 1
    assert "by hand" in _row(none, "Public endpoint")["mechanism"]
    assert "k8gb `Gslb` failover with `hydra` as primary, TTL 60 s" in _row(k8gb, "Public endpoint")["mechanism"]
    assert any(limit.startswith("No DNS failover") for limit in none["limits"])
    assert not any(limit.startswith("No DNS failover") for limit in k8gb["limits"])
    assert "moves the public record by hand" in _scenario(none, "The whole cluster")["whatStops"]
    assert "k8gb moves the public name" in _scenario(k8gb, "The whole cluster")["whatStops"]


def _oidc(only_start_if_available: bool) -> OidcSettings:
    return OidcSettings(
        issuer="https://id.example.com",
        client_id="headscale",
        allowed_domains=["example.com"],
        only_start_if_available=only_start_if_available,
    )


def test_the_oidc_provider_is_a_start_dependency_only_with_only_start_if_available(run_stack) -> None:
    recovery = run_stack("hydra").exports["recovery"]
    config = stack_config("hydra")
    assert not any(r["scenario"] == "The OIDC provider" for r in availability_report(config, recovery)["failures"])
    reports = {}
    for strict in (True, False):
        headscale = config.headscale.model_copy(update={"oidc": _oidc(strict)})
        reports[strict] = availability_report(config.model_copy(update={"headscale": headscale}), recovery)
    assert "every Headscale start" in _scenario(reports[True], "The OIDC provider")["whatStops"]
    assert any("start dependency" in limit for limit in reports[True]["limits"])
    assert "starts without OIDC login" in _scenario(reports[False], "The OIDC provider")["whatKeepsWorking"]
    assert not any("start dependency" in limit for limit in reports[False]["limits"])


def test_a_migrating_stack_is_paused(run_stack) -> None:
    recovery = run_stack("hydra").exports["recovery"]
    config = stack_config("hydra")
    database = config.database.model_copy(update={"stage": DatabaseStage.MIGRATING})
    report = availability_report(config.model_copy(update={"database": database}), recovery)
    assert report["classification"].startswith("paused for the migration")
    assert report["serving"] is False
    assert _row(report, "Headscale")["layout"].startswith("0 replicas (migrating)")


def test_the_report_is_json_with_camel_case_keys_and_says_what_it_is(run_stack) -> None:
    report, _ = _report(run_stack, "hydra")
    assert json.loads(json.dumps(report)) == report
    assert report["source"] == SOURCE
    assert "not a health check" in SOURCE

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for item in value.values() for k in keys(item)}
        if isinstance(value, list):
            return {k for item in value for k in keys(item)}
        return set()

    app_names = {"headscale", "headplane"}
    assert all(re.fullmatch(r"[a-z][A-Za-z]*", key) for key in keys(report) - app_names)
    assert list(report) == [
        "source",
        "site",
        "role",
        "serving",
        "stage",
        "storage",
        "nodes",
        "classification",
        "assumptions",
        "redundancy",
        "failures",
        "maintenance",
        "limits",
        "improvements",
    ]


def test_the_stack_output_is_the_summary_of_the_report_of_its_config(run_stack) -> None:
    run = run_stack("hydra")
    report = availability_report(stack_config("hydra"), run.exports["recovery"])
    output = run.exports["availability"]
    assert output == availability_output("hydra", report)
    assert output["details"] == "docs/availability/hydra.md"
    assert (PROJECT_DIR / output["details"]).is_file()
    assert output["classification"] == report["classification"]
    # Every scenario keeps its figures and the `recovery` row they come from; the prose lives on the page.
    assert [row["scenario"] for row in output["failures"]] == [row["scenario"] for row in report["failures"]]
    for row, full in zip(output["failures"], report["failures"], strict=True):
        assert row == {key: full[key] for key in ("scenario", "rto", "rpo", "recovery", "figures")}
    assert not {"redundancy", "maintenance", "limits", "improvements", "assumptions"} & set(output)
    page = (PROJECT_DIR / output["details"]).read_text(encoding="utf-8")
    for row in report["failures"]:
        assert table_cell(row["whatStops"]) in page, "what the output leaves out is on the page it names"
    assert len(json.dumps(output)) < len(json.dumps(report)) / 3


def test_the_markdown_is_deterministic_tables_line_up_and_it_says_how_to_regenerate(run_stack) -> None:
    report, _ = _report(run_stack, "hydra")
    page = render_markdown("hydra", report)
    assert page == render_markdown("hydra", json.loads(json.dumps(report)))
    assert page.startswith("# Availability of `hydra`\n")
    assert f"**Classification:** {report['classification']}." in page
    for heading in (
        "## What supplies redundancy",
        "## Failure scenarios",
        "## Upgrades and voluntary maintenance",
        "## What prevents a stronger claim",
        "## What would improve it",
    ):
        assert f"\n{heading}\n" in page
    last = page.rstrip("\n").splitlines()[-1]
    assert "make docs" in last
    assert last.startswith("Generated")
    for block in re.findall(r"((?:^\|.*\|\n)+)", page, flags=re.MULTILINE):
        widths = {len(re.findall(r"(?<!\\)\|", line)) for line in block.splitlines()}
        assert len(widths) == 1, block
    assert len(re.findall(r"^\| ", page, flags=re.MULTILINE)) >= len(report["failures"]) + len(report["redundancy"])


def _replaced(model: Any, key: str, value: Any) -> Any:
    """``model`` with the dotted ``key`` set to ``value`` (unvalidated: the report reads what it is given)."""
    head, _, rest = key.partition(".")
    return model.model_copy(update={head: _replaced(getattr(model, head), rest, value) if rest else value})


def _modes(config: StackConfig) -> dict[str, list[Any]]:
    """The settings the report's sentences depend on, each with the values it tells apart."""
    own_site = [site for site in config.tailnet.sites if site.name == config.site.name]
    return {
        "role": list(Role),
        "database.stage": list(DatabaseStage),
        "backup.local.storage": list(LocalStorage),
        "cluster.nodes": [1, 3],
        "headplane.enabled": [True, False],
        "headscale.replicas": [1, 0],
        "gateway.routers.replicas": [1, 2],
        "gateway.services.replicas": [1, 2],
        "database.postgres.instances": [1, 3],
        "database.postgres.streaming_host": [None, "pg.example.com"],
        "database.postgres.object_store": [None, ObjectStore(destination_path="s3://wal/lab")],
        "endpoint.failover": list(FailoverMode),
        "endpoint.route": list(RouteKind),
        "policy.mode": list(PolicyMode),
        "headscale.oidc": [None, _oidc(True), _oidc(False)],
        "headscale.derp.embedded": [False, True],
        "headscale.derp.urls": [config.headscale.derp.urls, []],
        "backup.rehearsal.enabled": [True, False],
        "backup.volsync": [None, VolSyncSettings(repository="restic")],
        "backup.nfs": [config.backup.nfs, Nfs(storage_class="nfs-csi"), None],
        "backup.local.ephemeral_storage_class": [None, "fast"],
        "cluster.storage_class": [None, "local-path"],
        "cluster.workloads_on_control_plane": [False, True],
        "cluster.exclude_nodes": [[], ["gpu-1"]],
        "tailnet.sites": [config.tailnet.sites, own_site],
    }


def test_every_template_finds_its_words_whatever_the_configuration(run_stack) -> None:
    """Many configurations drawn from the settings the report depends on (a fixed draw), with and without `recovery`
    figures: the templates find every word they name, and the page renders."""
    figures = run_stack("hydra").exports["recovery"]
    base = stack_config("hydra")
    modes = _modes(base)
    draw = random.Random(28)
    for number in range(200):
        config = base
        for key, values in modes.items():
            config = _replaced(config, key, draw.choice(values))
        report = availability_report(config, figures if number % 4 else {})
        assert [text for text in _texts(report) if re.search(r"[{}]", text)] == []
        assert render_markdown("lab", report).startswith("# Availability of `lab`")
