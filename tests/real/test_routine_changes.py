"""The routine changes of docs/lifecycle.md on the real engine, each judged against the engine model's plan.

hydra is deployed by the real CLI into the lab (no API access: none of these changes needs it); then, in order, the
changes of tests/program/test_lifecycle.py that touch only the cluster: a Headscale config edit, a Litestream image
bump and the same `up` again, a kubeconfig that names the other cluster (and back), one whose CA is being
rotated, and a larger backup claim.
Each real `up`'s changed steps must be the model's, run through the same sequence; where they differ, the model is
wrong.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from headscale_ha.program import failover
from tests.models.engine.lifecycle import Lab as ModelLab
from tests.models.engine.world import kubeconfig_for
from tests.support.kube_lab import KubeLab
from tests.support.lab_ingress import make_certificate
from tests.support.lab_sites import deploy
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, cli_for, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS)

Steps = set[tuple[str, str]]


@dataclass(frozen=True)
class Change:
    """One routine change: its stack config on the real CLI and, for the model, the same as config overrides."""

    name: str
    real: Callable[[PulumiCli, KubeLab], None]
    model: Callable[[ModelLab], dict[str, str]]


def _path(path: str, value: str) -> Change:
    return Change(
        f"{path}={value}",
        lambda cli, _lab: cli.set_path("hydra", path, value),
        lambda _model: {f"headscale-ha:{path}": value},
    )


def _kubeconfig(of: str) -> Change:
    def real(cli: PulumiCli, lab: KubeLab) -> None:
        cli.run("config", "set", "-s", "hydra", "--secret", "kubeconfig", stdin=lab.kubeconfig_path(of).read_text())

    return Change(f"kubeconfig of {of}", real, lambda model: {"headscale-ha:kubeconfig": kubeconfig_for(
        model.world.clusters[of])})  # fmt: skip


def _rotated_kubeconfig() -> Change:
    """hydra's kubeconfig in the middle of a CA rotation: a new CA ahead of the one that signed the server, as a
    bundle. Another active cluster to pulumi-kubernetes, so only the provider's clusterIdentifier keeps every object
    from being replaced."""

    def real(cli: PulumiCli, lab: KubeLab) -> None:
        document = yaml.safe_load(lab.kubeconfig_path("hydra").read_text())
        cluster = document["clusters"][0]["cluster"]
        new_ca = make_certificate(cli.root / "rotated-ca", "rotated.invalid")[0].read_bytes()
        bundle = new_ca + base64.b64decode(cluster["certificate-authority-data"])
        cluster["certificate-authority-data"] = base64.b64encode(bundle).decode()
        cli.run("config", "set", "-s", "hydra", "--secret", "kubeconfig", stdin=yaml.safe_dump(document)).check()

    def model(lab: ModelLab) -> dict[str, str]:
        server = lab.world.clusters["hydra"].server
        rotated = kubeconfig_for(lab.world.clusters["hydra"]).replace(
            f"server: '{server}'", f"server: '{server}', certificate-authority-data: bmV3IENB"
        )
        return {"headscale-ha:kubeconfig": rotated}

    return Change("kubeconfig with a rotated CA", real, model)


ROTATED = _rotated_kubeconfig()
LITESTREAM = ("backup.litestream.image", "docker.io/litestream/litestream:0.5.18")
#: Each `up` takes the config of the ones before it, as a user's stack file does.
CHANGES = [
    _path("headscale.logLevel", "debug"),
    _path(*LITESTREAM),
    Change("the same up again", lambda _cli, _lab: None, lambda _model: {}),
    _kubeconfig("cosmos"),
    _kubeconfig("hydra"),
    ROTATED,
    # A static NFS claim cannot grow (admission refuses it): a new size is a new claim and volume beside the kept
    # old ones (components/backup_volume.py), which the pods then mount.
    _path("backup.nfs.size", "20Gi"),
]


@dataclass
class Agreement:
    cli: PulumiCli
    real: list[Run]
    modelled: list[Steps] = field(default_factory=list)
    uids: list[dict[str, str]] = field(default_factory=list)


def _uids(lab: KubeLab, context: str) -> dict[str, str]:
    each = "{range .items[*]}{.metadata.namespace}/{.metadata.name}={.metadata.uid}{'\\n'}{end}"
    done = kubectl(lab, "--context", context, "get", "configmaps,deployments,services,secrets", "-A", "-o",
                   f"jsonpath={each}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if line)


def _model_runs() -> list[Steps]:
    model = ModelLab()
    try:
        model.first_deployment()
        config: dict[str, str] = {}
        runs = []
        for change in CHANGES:
            config |= change.model(model)
            up = model.run("up", "hydra", config)
            assert up.error is None, f"{change.name}: {up.text()}"
            runs.append({(step.op, step.name) for step in up.changes()})
        return runs
    finally:
        model.close()


@pytest.fixture(scope="module")
def agreement(lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Agreement:
    root: Path = tmp_path_factory.mktemp("routine-changes")
    cli = cli_for(lab, root)
    cli.identity()
    deploy(cli, lab, "hydra")
    found = Agreement(cli, [])
    for change in CHANGES:
        found.uids.append(_uids(lab, "cosmos"))
        change.real(cli, lab)
        found.real.append(cli.run("up", "--yes", "-s", "hydra"))
    found.uids.append(_uids(lab, "cosmos"))
    found.modelled = _model_runs()
    return found


@pytest.mark.parametrize("index", range(len(CHANGES)), ids=[change.name for change in CHANGES])
def test_the_real_engine_takes_the_steps_the_model_plans(agreement: Agreement, index: int) -> None:
    run = agreement.real[index].check()
    real = run.plan()
    modelled = agreement.modelled[index]
    assert real == modelled, (sorted(real - modelled), sorted(modelled - real))


def test_a_kubeconfig_of_the_other_cluster_creates_nothing_there(agreement: Agreement) -> None:
    assert agreement.uids[3] == agreement.uids[4] == agreement.uids[5] == agreement.uids[6]


def test_a_rotated_ca_updates_the_provider_only_and_it_still_reaches_the_cluster(agreement: Agreement) -> None:
    rotated = agreement.real[CHANGES.index(ROTATED)].check()
    assert {step.name for step in rotated.changed()} == {"hydra-kubernetes", "default"}, rotated.ops()
    after = agreement.real[CHANGES.index(ROTATED) + 1].check()  # the next change runs through the rotated one
    assert after.changed(), after.ops()


def test_up_awaits_headscale_as_long_as_its_progress_deadline_and_the_runbook_allow(
    agreement: Agreement, lab: KubeLab
) -> None:
    """The restore before serving can be slow: the engine's await of the Deployment (its state's customTimeouts),
    the Deployment's progress deadline and the promotion's `kubectl rollout status` share one budget."""
    exported = json.loads(agreement.cli.run("stack", "export", "-s", "hydra").check().stdout)
    resources = exported["deployment"]["resources"]
    (deployment,) = [r for r in resources if r["urn"].endswith("::hydra-headscale-deployment")]
    budget = failover.ROLLOUT_TIMEOUT_SECONDS
    assert deployment["customTimeouts"] == {"create": budget, "update": budget}
    done = kubectl(lab, "--context", "hydra", "-n", "headscale", "get", "deployment", "headscale", "-o",
                   "jsonpath={.spec.progressDeadlineSeconds}")  # fmt: skip
    assert done.stdout == str(budget)
