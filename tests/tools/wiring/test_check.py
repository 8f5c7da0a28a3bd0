"""check_wiring and its Finding: how a finding reads, what the check leaves alone, and that it runs on the
program's real plans.
"""

from __future__ import annotations

import copy

import pytest

from tests.support.wiring_objects import check, config_map, mounted, only, secret, service, web
from tools.wiring import Finding, check_wiring


def test_finding_reads_as_object_path_message() -> None:
    finding = only(check(mounted({"name": "data", "persistentVolumeClaim": {"claimName": "litestream-backup"}})))
    assert finding.obj == "Deployment/app/web"
    assert finding.path == "spec.template.spec.volumes[0].persistentVolumeClaim"
    assert str(finding) == (
        "Deployment/app/web: spec.template.spec.volumes[0].persistentVolumeClaim: claim 'litestream-backup' is not "
        "rendered and not a documented external object: the pod would stay Pending (FailedMount / unbound claim)"
    )


def test_a_sound_set_has_no_findings() -> None:
    assert check(web(), service(), secret("s", "k"), config_map("c", "k")) == []


def test_inputs_are_not_modified() -> None:
    objects = [mounted({"name": "c", "configMap": {"name": "missing"}})]
    before = copy.deepcopy(objects)
    check_wiring(objects)
    assert objects == before


def test_unknown_values_are_skipped_not_reported() -> None:
    """Names only known after a deployment (Pulumi's unknown markers) cannot be checked offline."""
    marker = object()
    assert check(mounted({"name": "c", "configMap": {"name": marker}})) == []


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_real_plan_is_checkable(stack: str, stack_outputs) -> None:
    """Integration smoke test: the check runs on the program's real output. It does NOT assert zero findings
    (declaring externals and optional references is the integration's job); it prints them for information."""
    from tools.plan import plan_stack

    run = plan_stack(stack, stack_outputs=stack_outputs)
    findings = check_wiring(run.kubernetes_objects())
    assert isinstance(findings, list)
    assert all(isinstance(f, Finding) for f in findings)
    print(f"{stack}: {len(findings)} findings", *findings, sep="\n")
