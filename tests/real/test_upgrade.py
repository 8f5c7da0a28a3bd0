"""`make upgrade` from Headscale 0.28 to 0.29 with real actors: the release's own binaries, the real migration.

Both sites start on the previous release (`headscale-previous`, built by `make real-tools`): the lab's kubelet runs
the binary of the release the pod's image names (tests/support/kube_lab_pods.py). hydra serves with API access,
cosmos follows it with API access too. `make upgrade VERSION=0.29.2 IMAGE=…` (tools/runbook.py with the real
`pulumi` and `kubectl`) sets the release in Pulumi.yaml, rolls hydra out on it (the pre-upgrade snapshot, then the
restore, then Headscale 0.29 migrating the database it restored), then cosmos. Every user keeps its id, and the
engine model plans the active's upgrade as the real engine ran it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import SITE_TOOLS, USERS, Runbook, Site, run_runbook, start_site, tailnet_cli
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, copy_project

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS, "headscale-previous")
PREVIOUS, RELEASE = "0.28.0", "0.29.2"
IMAGE = "ghcr.io/juanfont/headscale:{}"


def set_release(project: Path, version: str) -> None:
    """`headscale.version` and `headscale.image` of Pulumi.yaml, together (the release every site runs)."""
    path = project / "Pulumi.yaml"
    text, count = re.subn(
        r"^(\s+)version: \S+\n(\s+)image: ghcr\.io/juanfont/headscale:\S+$",
        rf"\g<1>version: {version}\n\g<2>image: {IMAGE.format(version)}",
        path.read_text(),
        flags=re.MULTILINE,
    )
    assert count == 1
    path.write_text(text)


def users_of(site: Site) -> list[tuple[str, str]]:
    done = site.server().cli("users", "list", "-o", "json")
    assert done.returncode == 0, done.stderr
    return [(user["id"], user["name"]) for user in json.loads(done.stdout)]


@dataclass
class Upgraded:
    root: Path
    cli: PulumiCli
    sites: dict[str, Site]
    users: list[tuple[str, str]]
    upgrade: Runbook


@pytest.fixture(scope="module")
def upgraded(site_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upgraded]:
    root = tmp_path_factory.mktemp("upgrade")
    cli, certificate = tailnet_cli(site_lab, root)
    set_release(cli.project, PREVIOUS)
    sites = {name: start_site(site_lab, root, name, certificate) for name in ("hydra", "cosmos")}
    try:
        cli.identity()
        for stack in ("hydra", "cosmos"):
            cli.run("stack", "init", stack).check()
            kubeconfig = site_lab.kubeconfig_path(stack).read_text()
            cli.run("config", "set", "--secret", "kubeconfig", stdin=kubeconfig).check()
            cli.run("up", "--yes").check()
            if stack == "hydra":
                sites["hydra"].pods.wait_ready()
                key = sites["hydra"].server().create_api_key("2h")
            cli.run("config", "set", "--secret", "bootstrapApiKey", key).check()
            cli.run("up", "--yes").check()
        assert sites["hydra"].server().version() == f"v{PREVIOUS}"
        users = users_of(sites["hydra"])
        yield Upgraded(root, cli, sites, users, run_runbook(cli, "upgrade", RELEASE, IMAGE.format(RELEASE)))
    finally:
        for site in sites.values():
            site.close()


def test_the_upgrade_runbook_succeeds(upgraded: Upgraded) -> None:
    assert upgraded.upgrade.code == 0, upgraded.upgrade.explain(upgraded.sites)
    assert [argv[-1].rsplit("/", 1)[-1] for argv, _ in upgraded.upgrade.runner.ups] == ["hydra", "cosmos"]


def test_hydra_serves_the_release_on_the_registry_it_had(upgraded: Upgraded) -> None:
    hydra = upgraded.sites["hydra"]
    assert hydra.server().version() == f"v{RELEASE}"
    assert users_of(hydra) == upgraded.users
    assert sorted(name for _, name in upgraded.users) == USERS
    first, second = hydra.pods.history
    assert second.init_exits == {"restore": 0, "pre-upgrade": 0}
    assert first.headscale is not None
    assert not first.headscale.running  # Recreate: the old release stopped before the new one started
    log = (second.root / "pre-upgrade.log").read_text()
    assert f"pre-upgrade snapshot ok: {PREVIOUS} -> {RELEASE}" in log, log
    (snapshot,) = (upgraded.root / "nfs").rglob(f"headscale/pre-upgrade/{PREVIOUS}-{RELEASE}/headscale.sqlite")
    with sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True) as db:  # the registry as 0.28 left it
        assert sorted(row[0] for row in db.execute("SELECT name FROM users")) == USERS


def modelled_upgrade(root: Path) -> set[tuple[str, str]]:
    """The engine model's `up` of hydra on the new release, after its own first deployment on the previous one."""
    project = copy_project(root / "model-project")
    set_release(project, PREVIOUS)
    model = ModelLab(api=True, headscale_version=PREVIOUS, project_dir=project)
    try:
        model.first_deployment()
        set_release(project, RELEASE)
        up = model.run("up", "hydra")
    finally:
        model.close()
    assert up.error is None, up.text()
    return {(step.op, step.name) for step in up.changes()}


def test_the_engine_model_plans_the_active_s_upgrade_as_the_real_engine_ran_it(
    upgraded: Upgraded, tmp_path: Path
) -> None:
    (_, hydra), _ = upgraded.upgrade.runner.ups
    real = hydra.plan()
    assert real == modelled_upgrade(tmp_path), hydra.ops()


def test_a_second_up_of_each_site_changes_nothing(upgraded: Upgraded) -> None:
    for stack in ("hydra", "cosmos"):
        again = upgraded.cli.run("up", "--yes", "-s", stack).check()
        assert again.changed() == [], again.ops()
