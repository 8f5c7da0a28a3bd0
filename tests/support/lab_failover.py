"""The lab's witness for automatic failover: a third real cluster holding the Lease, and the kubeconfigs the runbook
of docs/witness-lease.md ("Turning it on") has an operator make, each reaching its API server through a proxy of its
own that a test can cut (tests/support/cut_proxy.py).

- on the witness, in ``tailnet.failover.witnessNamespace``, the product's lease Role, one ServiceAccount per site
  bound to it, and per site a kubeconfig with a token of it (``witnessKubeconfig``);
- in each site's cluster, a token of the account the stack made for each other site (``headscale-failsafe-<other>``),
  in a kubeconfig that other site's stack holds (``peerKubeconfigs.<site>``).

:func:`automatic_tailnet` runs the whole runbook on sites deployed in manual mode (tests/real/
test_automatic_failover.py, bench/deployed_takeover.py).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from datetime import datetime

import yaml

from headscale_ha.components.witness_lease import lease_role
from tests.support.cut_proxy import CutProxy
from tests.support.kube_lab import KubeClient, KubeError, KubeLab
from tests.support.kube_lab_pods import PodRunner, RunningPod
from tests.support.lab_sites import Site, deploy_both, describe
from tests.support.real_pulumi import PulumiCli, Run

WITNESS = "witness"
#: tailnet.failover's defaults: where the Lease is.
WITNESS_NAMESPACE, LEASE = "headscale-ha", "headscale"
#: The namespace of a site's Headscale (the stacks' default).
SITE_NAMESPACE = "headscale"
TOKEN_SECONDS = 4 * 3600
SITES = ["hydra", "cosmos"]
#: A takeover's bound here: the Lease's wait, the gate's look, the restore, Headscale's start, the lab's polling.
TAKEOVER_TIMEOUT = 120.0


@dataclass
class Links:
    """Each site's proxies: to the witness, and to each other site's cluster (its failsafe)."""

    witness: dict[str, CutProxy] = field(default_factory=dict)
    peers: dict[tuple[str, str], CutProxy] = field(default_factory=dict)

    def cut(self, site: str, mode: str = "blackhole") -> None:
        """``site`` loses the witness and every other site: what it sends is never answered."""
        for proxy in self._of(site):
            proxy.cut(mode)

    def mend(self, site: str) -> None:
        for proxy in self._of(site):
            proxy.mend()

    def close(self) -> None:
        for proxy in [*self.witness.values(), *self.peers.values()]:
            proxy.close()

    def _of(self, site: str) -> list[CutProxy]:
        return [self.witness[site], *(proxy for (owner, _), proxy in self.peers.items() if owner == site)]


def token_kubeconfig(server: str, ca_pem: bytes, token: str, namespace: str | None = None) -> str:
    """A kubeconfig of one ServiceAccount token, as `kubectl config view --raw --minify` writes one."""
    context: dict[str, str] = {"cluster": "lease", "user": "lease"}
    if namespace is not None:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lease", "cluster": {"server": server,
                                                   "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [{"name": "lease", "context": context}],
        "users": [{"name": "lease", "user": {"token": token}}],
        "current-context": "lease",
    }  # fmt: skip
    return yaml.safe_dump(document)


def _create_once(client: KubeClient, path: str, body: dict) -> None:
    try:
        client.create(path, body)
    except KubeError as error:
        if error.status != 409:
            raise


def _token(client: KubeClient, namespace: str, account: str) -> str:
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    return client.create(path, {"spec": {"expirationSeconds": TOKEN_SECONDS}})["status"]["token"]


def _proxy(lab: KubeLab, cluster: str) -> CutProxy:
    proxy = CutProxy(lab.cluster(cluster).ports["api"])
    proxy.start()
    return proxy


def witness_kubeconfigs(lab: KubeLab, sites: list[str], links: Links) -> dict[str, str]:
    """Step 1 of the runbook: the witness's Role and one account per site, and each site's kubeconfig of it."""
    client = lab.client(WITNESS)
    _create_once(client, "/api/v1/namespaces", {"metadata": {"name": WITNESS_NAMESPACE}})
    roles = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{WITNESS_NAMESPACE}"
    _create_once(client, f"{roles}/roles", lease_role("headscale-lease", WITNESS_NAMESPACE, LEASE))
    ca = (lab.cluster(WITNESS).pki / "ca.crt").read_bytes()
    made = {}
    for site in sites:
        _create_once(client, f"/api/v1/namespaces/{WITNESS_NAMESPACE}/serviceaccounts", {"metadata": {"name": site}})
        binding = {"metadata": {"name": site},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "headscale-lease"},
                   "subjects": [{"kind": "ServiceAccount", "name": site, "namespace": WITNESS_NAMESPACE}]}  # fmt: skip
        _create_once(client, f"{roles}/rolebindings", binding)
        links.witness[site] = _proxy(lab, WITNESS)
        server = f"https://127.0.0.1:{links.witness[site].port}"
        made[site] = token_kubeconfig(server, ca, _token(client, WITNESS_NAMESPACE, site), WITNESS_NAMESPACE)
    return made


def peer_kubeconfigs(lab: KubeLab, sites: list[str], links: Links) -> dict[str, dict[str, str]]:
    """Step 3: for each site, each other site's kubeconfig of the account that other site's stack made for it
    (``headscale-failsafe-<site>``), by the site whose stack holds it and then the cluster it reaches."""
    made: dict[str, dict[str, str]] = {site: {} for site in sites}
    for site in sites:
        for other in (s for s in sites if s != site):
            client = lab.client(other)
            links.peers[(site, other)] = _proxy(lab, other)
            server = f"https://127.0.0.1:{links.peers[(site, other)].port}"
            token = _token(client, SITE_NAMESPACE, f"headscale-failsafe-{site}")
            ca = (lab.cluster(other).pki / "ca.crt").read_bytes()
            made[site][other] = token_kubeconfig(server, ca, token, SITE_NAMESPACE)
    return made


def lease(lab: KubeLab) -> dict:
    """The witness's Lease as its API server has it."""
    return lab.client(WITNESS).get(f"/apis/coordination.k8s.io/v1/namespaces/{WITNESS_NAMESPACE}/leases/{LEASE}")


def lease_holder(lab: KubeLab) -> tuple[str, int]:
    """The Lease's holder and its fencing counter (leaseTransitions)."""
    spec = lease(lab)["spec"]
    return spec.get("holderIdentity", ""), int(spec.get("leaseTransitions", 0))


def taken_at(lab: KubeLab) -> float:
    """When the Lease's holder sent its take, on time.monotonic()'s scale: its ``acquireTime``, a wall-clock time
    the gate reads before it sends the write (the lab's processes share one clock). A follower counts its lease from
    a read that saw the take, so after this; a gate's exit is noticed later than the take, and cannot bound it."""
    stamp = lease(lab)["spec"]["acquireTime"]
    sent = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return sent - time.time() + time.monotonic()


def serving_pod(site: Site, *, besides: set[str], timeout: float = TAKEOVER_TIMEOUT) -> RunningPod:
    """The first Headscale pod of ``site`` that serves, none of ``besides``; raises with the pods' story if none
    does."""
    return ready_pod(site.pods, site.name, besides=besides, timeout=timeout)


def ready_pod(pods: PodRunner, site: str, *, besides: set[str], timeout: float = TAKEOVER_TIMEOUT) -> RunningPod:
    """The first pod ``pods`` runs that is ready, none of ``besides``; raises with the pods' story if none is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in pods.serving():
            if pod.name not in besides:
                return pod
        time.sleep(0.2)
    story = "\n".join(describe(pod) for pod in pods.history)
    raise AssertionError(f"{site}: no new {pods.app} pod ready within {timeout:.0f}s:\n{story}")


def set_automatic(cli: PulumiCli) -> None:
    """Step 4 of the runbook: `tailnet.failover.automatic: true` in the project's Pulumi.yaml."""
    project = cli.project / "Pulumi.yaml"
    text = project.read_text()
    assert text.count("      activeSite: hydra\n") == 1
    on = "      activeSite: hydra\n      failover: {automatic: true}\n"
    project.write_text(text.replace("      activeSite: hydra\n", on))


def automatic_tailnet(cli: PulumiCli, lab: KubeLab, sites: dict[str, Site], links: Links) -> dict[str, Run]:
    """Both sites deployed in manual mode, hydra serving its users through the API; then docs/witness-lease.md
    "Turning it on", step by step, until hydra's gated pod serves and cosmos's waits: each `pulumi up` by step."""
    deploy_both(cli, lab, sites)
    ups = {}
    for site, kubeconfig in witness_kubeconfigs(lab, SITES, links).items():  # steps 1 and 2
        cli.run("config", "set", "-s", site, "--secret", "witnessKubeconfig", stdin=kubeconfig).check()
        ups[f"witness {site}"] = cli.run("up", "--yes", "-s", site).check()
    for site, others in peer_kubeconfigs(lab, SITES, links).items():  # step 3
        for other, kubeconfig in others.items():
            path = f"peerKubeconfigs.{other}"
            cli.run("config", "set", "-s", site, "--secret", "--path", path, stdin=kubeconfig).check()
    set_automatic(cli)
    manual = {pod.name for pod in sites["hydra"].pods.history}
    ups["hydra"] = cli.run("up", "--yes", "-s", "hydra").check()
    serving_pod(sites["hydra"], besides=manual)
    ups["cosmos"] = cli.run("up", "--yes", "-s", "cosmos").check()
    return ups
