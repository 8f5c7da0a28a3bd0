"""The active site as it runs: its Headscale pod run for real, reached through its ingress at its public address.

hydra is deployed by the real CLI into the lab, whose kubelet runs Headscale's pod as the API server has it
(tests/support/kube_lab_pods.py): the restore init container (the rendered script, real Litestream), the
position recorder (a real service-account token, the stack's Role), the backup signer, Litestream replicating to
the NFS export, and Headscale on the pod's identity Secret. The site's ingress (tests/support/lab_ingress.py)
serves the public hostname at the site's `publicAddress` with a certificate of the lab's CA. The stack keeps the
default API URL, the public one, which nothing here resolves: the provider must reach Headscale at the active
site's address (headscale_ha/provider/base.py), as a promotion needs before DNS has moved.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import SITE_TOOLS, USERS, Site, backed_up_users, deploy, start_site, tailnet_cli
from tests.support.litestream_lab import wait_until
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS)


@dataclass
class Served:
    cli: PulumiCli
    site: Site
    root: Path
    first: Run
    api: Run


@pytest.fixture(scope="module")
def served(site_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """hydra deployed and serving; then API access with the default URL and `pulumi up`."""
    root = tmp_path_factory.mktemp("served-site")
    cli, certificate = tailnet_cli(site_lab, root)
    site = start_site(site_lab, root, "hydra", certificate)
    try:
        cli.identity()
        first = deploy(cli, site_lab, "hydra")
        site.pods.wait_ready()
        cli.run("config", "set", "--secret", "bootstrapApiKey", site.server().create_api_key("2h")).check()
        yield Served(cli, site, root, first, cli.run("up", "--yes").check())
    finally:
        site.close()


def test_the_pod_ran_its_restore_and_serves_on_its_own_identity(served: Served) -> None:
    (pod,) = served.site.pods.history
    assert pod.failure is None
    assert pod.init_exits == {"restore": 0, "pre-upgrade": 0}
    noise = (pod.root / "containers/headscale/etc/headscale/identity/noise_private.key").read_text()
    secret = served.site.pods.client.get("/api/v1/namespaces/headscale/secrets/headscale-identity")
    assert noise.encode() == base64.b64decode(secret["data"]["noise.key"])


def test_the_default_url_reaches_the_active_site_and_creates_the_users(served: Served) -> None:
    created = {step.name for step in served.api.changed() if step.op == "create"}
    assert {f"hydra-tailnet-user-{name}" for name in USERS} <= created, served.api.ops()
    users = json.loads(served.site.server().cli("users", "list", "-o", "json").stdout)
    assert sorted(user["name"] for user in users) == USERS
    assert served.site.ingress.handshakes, "the provider never came through the site's ingress"


def test_the_backup_reaches_the_export_and_the_recorder_records_its_position(served: Served, site_lab: KubeLab) -> None:
    assert wait_until(lambda: backed_up_users(served.root) == USERS, timeout=60, interval=1), backed_up_users(
        served.root
    )

    def recorded() -> str:
        done = kubectl(site_lab, "--context", "hydra", "-n", "headscale", "get", "configmap", "headscale-served", "-o",
                       "jsonpath={.data.position}")  # fmt: skip
        return done.stdout if done.returncode == 0 else ""

    assert wait_until(lambda: bool(recorded()), timeout=60, interval=1), "no position recorded"
    txid, signed_at = recorded().split()
    assert len(txid) == 16
    assert int(txid, 16) > 0
    assert int(signed_at) > 0
