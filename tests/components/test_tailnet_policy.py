"""TailnetPolicy: the rendered policy published for review, its hash a stack output, errors named."""

from __future__ import annotations

import hashlib
import json

import pytest

from components.tailnet_policy import CONFIG_MAP, HASH_ANNOTATION
from program.config import ConfigError


def _config_map(run) -> dict:
    (found,) = [o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == CONFIG_MAP]
    return found


def test_published_policy_hash_matches_text_and_output(run_stack) -> None:
    run = run_stack("hydra")
    config_map = _config_map(run)
    text = config_map["data"]["policy.json"]
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert config_map["metadata"]["annotations"][HASH_ANNOTATION] == digest
    assert run.outputs["policy"] == {"mode": "dryRun", "sha256": digest, "configMap": f"headscale/{CONFIG_MAP}"}


def test_one_tailnet_one_policy_on_every_stack(run_stack) -> None:
    assert _config_map(run_stack("hydra"))["data"] == _config_map(run_stack("cosmos"))["data"]


def test_every_site_route_is_auto_approved_for_its_router_tag(run_stack) -> None:
    policy = json.loads(_config_map(run_stack("cosmos"))["data"]["policy.json"])
    routes = policy["autoApprovers"]["routes"]
    assert routes["10.244.0.0/16"] == ["tag:subnet-router-hydra"]
    assert routes["172.31.250.0/28"] == ["tag:subnet-router-cosmos"]
    assert policy["hosts"]["gateway-hydra"] == "172.30.250.10/32"
    assert policy["tagOwners"]["tag:subnet-router-cosmos"] == ["group:admins"]


def test_a_broken_base_policy_fails_the_plan_with_its_path(run_stack, lab_project, tmp_path) -> None:
    broken = tmp_path / "broken.hujson"
    broken.write_text(
        "{\n  // HuJSON: comments and trailing commas\n"
        '  "groups": {"group:admins": ["alice@"]},\n'
        '  "acls": [{"action": "accept", "src": ["group:nobody"], "dst": ["*:*"]},],\n}\n'
    )
    with pytest.raises(ConfigError) as caught:
        run_stack("lab", project_dir=lab_project(f"  headscale-ha:policy: {{file: {broken}}}\n"))
    assert caught.value.problems == [
        f"headscale-ha:policy ({broken}) acls[0].src[0]: group 'group:nobody' is not defined in groups"
    ]


def test_a_missing_policy_file_is_a_config_error(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"headscale-ha:policy\.file: cannot be read"):
        run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {file: policy/nope.hujson}\n"))
