"""The CrossGuard guard rails: silent on both stacks, each one firing on a deliberately broken resource."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationArgs

from headscale_ha.guardrails.pack.pack import PACK_NAME, build_policies
from headscale_ha.guardrails.pack.rules import RULES, Subject, advisories, containers, pod_spec, violations
from tools.harness import PROJECT_DIR, ProgramRun, RegisteredResource


def _subject(resource: RegisteredResource, props: dict[str, Any] | None = None) -> Subject:
    return Subject(type=resource.type, name=resource.name, props=props if props is not None else resource.inputs)


def _find(run: ProgramRun, kind: str, name: str) -> RegisteredResource:
    (found,) = [r for r in run.resources if r.type.endswith(f":{kind}") and r.inputs["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_every_rule_passes_on_the_shipped_stacks(stack: str, run_stack) -> None:
    run = run_stack(stack)
    found = {r.name: violations(_subject(r)) for r in run.resources}
    assert {name: v for name, v in found.items() if v} == {}
    workloads = {r.inputs["metadata"]["name"] for r in run.resources if r.type.startswith("kubernetes:apps/v1:")}
    assert workloads == {
        "headscale",
        "headplane",
        "tailnet-gateway",
        *(f"subnet-router-{n}" for n in range(2 if stack == "hydra" else 1)),
        "headscale-ha-exporter",
    }, "the rules saw every workload"


def _broken(run_stack, kind: str, name: str, mutate) -> dict[str, list[str]]:
    resource = _find(run_stack("hydra"), kind, name)
    props = copy.deepcopy(resource.inputs)
    mutate(props)
    return violations(_subject(resource, props))


def _pod(props: dict) -> dict:
    return props["spec"]["template"]["spec"]


def _init(props: dict, name: str) -> dict:
    (found,) = [c for c in _pod(props)["initContainers"] if c["name"] == name]
    return found


def _drop_init(props: dict, name: str) -> None:
    _pod(props)["initContainers"].remove(_init(props, name))


def test_moving_tag_fires(run_stack) -> None:
    def mutate(props: dict) -> None:
        _init(props, "litestream")["image"] = "docker.io/litestream/litestream:latest"

    found = _broken(run_stack, "Deployment", "headplane", mutate)
    assert list(found) == ["no-moving-image-tags"]
    assert "'litestream'" in found["no-moving-image-tags"][0]
    assert "moving tag 'latest'" in found["no-moving-image-tags"][0]


def test_second_headscale_replica_fires(run_stack) -> None:
    found = _broken(run_stack, "Deployment", "headscale", lambda p: p["spec"].update(replicas=2))
    assert found == {"headscale-singleton": ["replicas is 2: Headscale supports exactly one instance (0 or 1)"]}


def test_rolling_update_of_headscale_fires(run_stack) -> None:
    found = _broken(
        run_stack, "Deployment", "headscale", lambda p: p["spec"].update(strategy={"type": "RollingUpdate"})
    )
    assert list(found) == ["headscale-singleton"]
    assert "Recreate" in found["headscale-singleton"][0]


@pytest.mark.parametrize(
    ("drop", "expected"), [("restore", "no restore init container"), ("litestream", "no Litestream `replicate`")]
)
def test_missing_backup_container_fires(drop: str, expected: str, run_stack) -> None:
    found = _broken(run_stack, "Deployment", "headscale", lambda p: _drop_init(p, drop))
    assert list(found) == ["sqlite-backed-up"]
    assert found["sqlite-backed-up"][0].startswith(expected)


def test_replicate_as_a_plain_init_container_does_not_count(run_stack) -> None:
    """An init container without restartPolicy Always would block the pod forever, not replicate alongside it."""
    found = _broken(run_stack, "Deployment", "headscale", lambda p: _init(p, "litestream").pop("restartPolicy"))
    assert list(found) == ["sqlite-backed-up"]


def test_identity_in_a_config_map_fires(run_stack) -> None:
    key = "privkey:" + "0" * 64
    found = _broken(run_stack, "ConfigMap", "headscale-config", lambda p: p["data"].update({"noise.key": key}))
    assert found == {
        "identity-only-in-secrets": ["data['noise.key'] holds a node private key; keys belong in a Secret"]
    }


def test_identity_in_an_environment_variable_fires(run_stack) -> None:
    key = "privkey:" + "a" * 64

    def mutate(props: dict) -> None:
        _pod(props)["containers"][0]["env"] = [{"name": "NOISE", "value": key}]

    found = _broken(run_stack, "Deployment", "headscale", mutate)
    assert list(found) == ["identity-only-in-secrets"]
    assert key not in found["identity-only-in-secrets"][0]


def test_missing_limit_fires(run_stack) -> None:
    found = _broken(
        run_stack, "Deployment", "headplane", lambda p: _pod(p)["containers"][0]["resources"]["limits"].pop("memory")
    )
    assert found == {"containers-limited-non-root": ["container 'headplane': no memory limit"]}


def test_root_container_fires(run_stack) -> None:
    def mutate(props: dict) -> None:
        _pod(props)["containers"][0]["securityContext"]["runAsUser"] = 0

    found = _broken(run_stack, "Deployment", "headscale", mutate)
    assert list(found) == ["containers-limited-non-root"]


def test_unrelated_resources_are_not_judged() -> None:
    subject = Subject(type="random:index/randomBytes:RandomBytes", name="k", props={"length": 32})
    assert violations(subject) == {}


def test_crossguard_adapter_reports_each_rule(run_stack) -> None:
    resource = _find(run_stack("hydra"), "Deployment", "headscale")
    props = copy.deepcopy(resource.inputs)
    props["spec"]["replicas"] = 3
    _pod(props)["containers"][0]["image"] = "ghcr.io/juanfont/headscale:stable"
    policies = build_policies()
    assert [p.name for p in policies] == [rule.name for rule in RULES]
    reported: dict[str, list[str]] = {}
    for policy in policies:
        args = ResourceValidationArgs(resource.type, props, resource.urn, resource.name, None, None)
        policy.validate(args, lambda message, urn=None, name=policy.name: reported.setdefault(name, []).append(message))
    assert set(reported) == {"headscale-singleton", "no-moving-image-tags", "prefer-image-digests"}
    levels = {p.name: p.enforcement_level for p in policies}
    assert levels.pop("prefer-image-digests") == EnforcementLevel.ADVISORY, "a tag-only pin warns, never blocks"
    assert set(levels.values()) == {EnforcementLevel.MANDATORY}
    assert all(message.startswith(f"{resource.name}: ") for messages in reported.values() for message in messages)
    assert PACK_NAME == "headscale-ha-guardrails"


def test_a_headscale_server_outside_a_deployment_fires_but_a_configtest_job_does_not() -> None:
    container = {"name": "headscale", "image": "ghcr.io/juanfont/headscale:0.29.2", "args": ["serve"]}
    job = {"spec": {"template": {"spec": {"containers": [container]}}}}
    found = violations(Subject(type="kubernetes:batch/v1:Job", name="j", props=job))
    assert "headscale-singleton" in found
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["configtest"]
    assert "headscale-singleton" not in violations(Subject(type="kubernetes:batch/v1:Job", name="j", props=job))


# --- advisory: digest pins preferred ---------------------------------------------------------------------------

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _job(*images: str) -> Subject:
    """A Job whose containers pass every other rule: only the images differ."""
    containers = [
        {
            "name": f"c{i}",
            "image": image,
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        }
        for i, image in enumerate(images)
    ]
    props = {"spec": {"template": {"spec": {"containers": containers}}}}
    return Subject(type="kubernetes:batch/v1:Job", name="j", props=props)


def test_tag_only_pins_are_advised_not_failed() -> None:
    subject = _job("ghcr.io/juanfont/headscale:0.29.2", f"docker.io/litestream/litestream:0.5.17@{DIGEST}")
    assert violations(subject) == {}
    assert advisories(subject) == {
        "prefer-image-digests": [
            "container 'c0': image 'ghcr.io/juanfont/headscale:0.29.2' is pinned by tag only; add its digest "
            "(ghcr.io/juanfont/headscale:0.29.2@sha256:<64 hex>) so the bytes cannot change under the same tag"
        ]
    }


def test_digest_pins_pass_every_rule() -> None:
    subject = _job(f"ghcr.io/juanfont/headscale:0.29.2@{DIGEST}", f"ghcr.io/cloudnative-pg/postgresql:15.18@{DIGEST}")
    assert violations(subject) == {}
    assert advisories(subject) == {}


def test_a_malformed_digest_is_still_a_failure() -> None:
    found = violations(_job("ghcr.io/juanfont/headscale:0.29.2@sha256:abc"))
    assert list(found) == ["no-moving-image-tags"]
    assert "sha256: followed by 64 lowercase hex" in found["no-moving-image-tags"][0]


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_the_shipped_stacks_are_advised_about_every_tag_only_image(stack: str, run_stack) -> None:
    run = run_stack(stack)
    advised = {
        message.split("image ")[1].split(" ")[0].strip("'")
        for r in run.resources
        for message in advisories(_subject(r)).get("prefer-image-digests", [])
    }
    images = {
        str(c["image"]) for r in run.resources if (pod := pod_spec(_subject(r))) is not None for c in containers(pod)
    }
    assert images, "the stacks deploy images"
    assert advised == images, "every deployed image is pinned by tag only today, and each is named"


def test_make_plan_prints_the_advisories(run_stack) -> None:
    from tools.plan import advisory_warnings

    warnings = advisory_warnings(run_stack("hydra"))
    assert warnings
    assert all(w.startswith("warning: prefer-image-digests (advisory): ") for w in warnings)
    assert any("ghcr.io/juanfont/headscale:0.29.2" in w for w in warnings)


def test_the_packs_environment_installs_the_package_with_the_programs_pins() -> None:
    """The Pulumi CLI installs guardrails/pack/requirements.txt into the pack's own venv: the rules are
    headscale-ha's package (installed from the repository), and every dependency it pulls in is pinned as the
    program pins it."""
    pack = (PROJECT_DIR / "guardrails" / "pack" / "requirements.txt").read_text().splitlines()
    program = (PROJECT_DIR / "requirements.txt").read_text().splitlines()

    def pins(lines: list[str]) -> set[str]:
        return {line for line in lines if "==" in line and not line.startswith("#")}

    assert "-e ../.." in pack
    assert pins(pack) == pins(program) | {"pulumi-policy==1.21.0"}
