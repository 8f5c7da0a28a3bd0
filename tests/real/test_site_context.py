"""Without `kubeconfig`, each stack deploys into its own site's cluster, whatever the shell's current context.

One shell runs both stacks' `up` (`make promote` does), so the ambient kubeconfig's current context is the same
for both: before issue 38 the standby's objects went wherever it pointed. Here the current context is hydra's and
both stacks are deployed with no `kubeconfig` in their config: the real pulumi-kubernetes must put each site's
Headscale in its own cluster (the context named after the site), so the one in cosmos is cosmos's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.kube_lab import KubeLab
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS)


def test_the_standby_lands_in_its_own_cluster_when_the_current_context_is_the_active(
    lab: KubeLab, tmp_path: Path
) -> None:
    ambient = yaml.safe_load(lab.kubeconfig.read_text())
    ambient["current-context"] = "hydra"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(ambient))
    cli = PulumiCli(tmp_path / "cli", extra_env={"KUBECONFIG": str(kubeconfig)})
    cli.identity()
    for site in ("hydra", "cosmos"):  # the documented order: the standby reads the active's outputs
        cli.run("stack", "init", site).check()
        up = cli.run("up", "--yes").check()
        assert any(step.name == f"{site}-headscale-deployment" for step in up.steps), up.ops()
    uids = {}
    for site in ("hydra", "cosmos"):
        state = json.loads(cli.run("stack", "export", "-s", site).check().stdout)
        resources = state["deployment"]["resources"]
        provider = next(r for r in resources if r["urn"].endswith(f"::{site}-kubernetes"))
        assert provider["inputs"]["context"] == site
        (deployment,) = [r for r in resources if r["urn"].endswith(f"::{site}-headscale-deployment")]
        uids[site] = deployment["outputs"]["metadata"]["uid"]
    for context in ("hydra", "cosmos"):
        done = kubectl(lab, "--context", context, "-n", "headscale", "get", "deployment", "headscale", "-o", "json")
        assert json.loads(done.stdout)["metadata"]["uid"] == uids[context], f"{context} holds another site's Headscale"
