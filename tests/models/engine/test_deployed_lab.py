"""A lab deployed once per module hands every test the lab as just deployed (tests/models/engine/lifecycle.py): what
one test did to the clusters, the states, the fake Headscale or the project copy must not reach the next."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import requests

from tests.models.engine.lifecycle import DeployedLab, Lab
from tools.harness import PROJECT_DIR

ROUTERS = "headscale-ha:gateway.routers.replicas"


def _everything(lab: Lab) -> tuple:
    """What a test can observe of a lab: every cluster's objects and clock, every stack's state and outputs (as
    printed: a secret output is a placeholder), the world's flags, the fake's registry and release, and the project
    copy's stack files."""
    world = lab.world
    clusters = {name: (copy.deepcopy(c.objects), c.now, set(c.unready)) for name, c in world.clusters.items()}
    stacks = {key: (repr(state.resources), repr(state.outputs)) for key, state in world.stacks.items()}
    fake = lab.headscale
    assert fake is not None
    registry = (set(fake.users), set(fake.nodes), set(fake.preauth_keys), set(fake.api_keys), fake.policy_text)
    files = {path.name: path.read_text() for path in sorted(lab.project_dir.glob("Pulumi*.yaml"))}
    return clusters, stacks, (set(world.lost), world.dns_site), registry, fake.version, files, dict(lab.overrides)


def test_what_a_test_changes_is_gone_for_the_next(tmp_path: Path) -> None:
    for path in PROJECT_DIR.glob("Pulumi*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    deployed = DeployedLab(api=True, project_dir=tmp_path)
    try:
        lab = deployed.fresh()
        before = _everything(lab)
        fake = lab.headscale
        assert fake is not None
        url = fake.url
        # One test's worth of changes: an up with another value, a user, a lost site, a dark URL, edited files.
        assert lab.run("up", "hydra", {ROUTERS: 3}).error is None
        fake.add_user("mallory")
        fake.restart_as("0.28.0")
        lab.overrides["cosmos"] = {ROUTERS: 1}
        lab.world.lost.add("cosmos")
        lab.hydra.unready.add("headscale")
        (tmp_path / "Pulumi.yaml").write_text("edited\n")
        (tmp_path / "Pulumi.extra.yaml").write_text("config: {}\n")
        fake.go_dark("blackhole")
        assert _everything(lab) != before

        again = deployed.fresh()
        assert again is lab
        assert _everything(again) == before
        assert fake.url == url
        assert requests.get(f"{url}/version", timeout=5).json()["version"] == "v0.29.2", "serving again, same URL"
        assert again.run("preview", "hydra").changes() == [], "the state and the program agree, as after deploying"
    finally:
        deployed.close()
