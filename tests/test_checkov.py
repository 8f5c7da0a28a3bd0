"""checkov on every rendered stack and option set: no failed check, and every skip carries its reason inline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.real_tools import TOOLS
from tests.support.option_sets import ALL_SETS, option_set_run
from tools.plan import write_rendered


def _checkov(directory: Path) -> dict:
    checkov = TOOLS["checkov"].find()
    assert checkov is not None
    result = subprocess.run(
        [str(checkov), "-d", str(directory), "--framework", "kubernetes", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    (kubernetes,) = [r for r in reports if r.get("check_type") == "kubernetes"]
    return kubernetes


def _rendered(option_set: str, project_copy, tmp_path: Path, stack_outputs: dict[str, dict]) -> Path:
    run = option_set_run(option_set, project_copy, stack_outputs)
    out = tmp_path / "rendered"
    write_rendered(run, out)
    return out


@pytest.mark.real_tool("checkov")
@pytest.mark.parametrize("option_set", ALL_SETS)
def test_checkov_finds_no_unjustified_failure(option_set: str, project_copy, tmp_path: Path, stack_outputs) -> None:
    report = _checkov(_rendered(option_set, project_copy, tmp_path, stack_outputs))
    failed = [f"{c['check_id']} {c['resource']}: {c['check_name']}" for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 100
    for skipped in report["results"].get("skipped_checks", []):
        reason = (skipped.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason) > 20, f"{skipped['check_id']} on {skipped['resource']} is skipped without a reason"


@pytest.mark.real_tool("checkov")
def test_checkov_does_fail_a_bad_object(project_copy, tmp_path: Path, stack_outputs) -> None:
    """The check above can fail: a privileged container with no limits is reported."""
    out = _rendered("hydra", project_copy, tmp_path, stack_outputs)
    path = next(out.rglob("deployment-headscale.yaml"))
    deployment = yaml.safe_load(path.read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"privileged": True}
    container.pop("resources")
    path.write_text(yaml.safe_dump(deployment))
    failed = {c["check_id"] for c in _checkov(out)["results"]["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_13"} <= failed
