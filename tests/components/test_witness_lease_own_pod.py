"""A fenced renewer deletes its own pod, and nothing else: the Role and the admission policy of
components/witness_lease.py on a real kube-apiserver, and the script's delete (witness-lease.sh ``hold`` with
``POD_NAME``) through a token bound to the pod, as the projected volume gives it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from headscale_ha.components.witness_lease import own_pod_policy, renewer_role, renewer_role_binding
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.kube_lab import KubeError, wait_for
from tests.support.litestream_lab import wait_until
from tests.support.witness_lab import TEST_TIMING, Witness, new_site

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)

NAMESPACE, ACCOUNT, POLICY = "serving-site", "headscale", "headscale-ha-serving-site-own-pod"
FAILSAFE = "headscale-failsafe"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
UNSCHEDULED = "no-such-scheduler"  # Site.pod: the pods stay Pending, out of kwok's hands
DENIED = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT} may delete only the pod its token is bound to"


@dataclass
class Site:
    witness: Witness

    def pod(self, name: str) -> dict[str, Any]:
        """A pod of the serving account that stays Pending, bound to no node.

        It names a scheduler no lab runs, so kwok (the lab's stand-in kubelet) never manages it. kwok deletes a pod
        it sees terminating by name, with no UID precondition: for a pod deleted and created again under the same
        name, a delete kwok had already queued could land on the successor. An unscheduled pod is deleted at once
        by the API server itself. What these tests check (RBAC, the admission policy, a bound token and the
        script's UID precondition) does not depend on the pod running."""
        spec = {"serviceAccountName": ACCOUNT, "automountServiceAccountToken": False, "schedulerName": UNSCHEDULED,
                "containers": [{"name": "headscale", "image": "headscale"}]}  # fmt: skip
        return self.witness.client.create(PODS, {"metadata": {"name": name}, "spec": spec})

    def token(self, pod: dict[str, Any] | None) -> str:
        """A token of the serving account, bound to ``pod`` as a projected volume's is (None: bound to nothing)."""
        bound = {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                    "uid": pod["metadata"]["uid"]}} if pod else {}  # fmt: skip
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token"
        request = {"spec": {"expirationSeconds": 3600, **bound}}
        # The API server looks the pod up in its cache, which may not hold a pod created a moment ago yet (404);
        # on a loaded machine (two test workers on two cores) that took over 10 s once.
        name = pod["metadata"]["name"] if pod else "nothing"
        return wait_for(lambda: self.witness.client.create(path, request)["status"]["token"], timeout=30,
                        what=f"a token bound to {name}")  # fmt: skip

    def as_token(self, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        url = f"https://127.0.0.1:{self.witness.api_port}{path}"
        headers = {"Authorization": f"Bearer {token}"}
        return requests.request(method, url, json=body, headers=headers, verify=str(self.witness.ca), timeout=15)

    def serving(self, name: str) -> bool:
        """The pod exists and is not being deleted."""
        try:
            pod = self.witness.client.get(f"{PODS}/{name}")
        except KubeError as error:
            if error.status == 404:
                return False
            raise
        return "deletionTimestamp" not in pod["metadata"]


@pytest.fixture(scope="module")
def site(witness: Witness) -> Site:
    client = witness.client
    client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    client.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": ACCOUNT}})
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    client.create(f"{rbac}/namespaces/{NAMESPACE}/roles", renewer_role(ACCOUNT, NAMESPACE, FAILSAFE))
    client.create(f"{rbac}/namespaces/{NAMESPACE}/rolebindings", renewer_role_binding(ACCOUNT, NAMESPACE, ACCOUNT))
    policy, binding = own_pod_policy(POLICY, NAMESPACE, ACCOUNT)
    admission = "/apis/admissionregistration.k8s.io/v1"
    client.create(f"{admission}/validatingadmissionpolicies", policy)
    client.create(f"{admission}/validatingadmissionpolicybindings", binding)
    made = Site(witness)
    probe, other = made.pod("probe"), made.pod("probe-other")
    token = made.token(probe)
    # The API server enforces a new policy once its informers have it: a dry-run delete of another pod shows when.
    assert wait_until(
        lambda: made.as_token(token, "DELETE", f"{PODS}/{other['metadata']['name']}?dryRun=All").status_code == 403,
        timeout=30,
    )
    return made


def test_the_serving_account_deletes_the_pod_its_token_is_bound_to_and_no_other(site: Site) -> None:
    own, other = site.pod("headscale-own"), site.pod("headscale-other")
    token = site.token(own)
    refused = site.as_token(token, "DELETE", f"{PODS}/headscale-other")
    assert refused.status_code == 403
    assert DENIED in refused.json()["message"]
    assert site.serving("headscale-other")
    deleted = site.as_token(token, "DELETE", f"{PODS}/headscale-own",
                            {"preconditions": {"uid": own["metadata"]["uid"]}})  # fmt: skip
    assert deleted.status_code == 200, deleted.text
    assert not site.serving("headscale-own")
    assert other["metadata"]["uid"] == site.witness.client.get(f"{PODS}/headscale-other")["metadata"]["uid"]


def test_a_token_bound_to_no_pod_deletes_no_pod(site: Site) -> None:
    site.pod("headscale-unbound")
    refused = site.as_token(site.token(None), "DELETE", f"{PODS}/headscale-unbound")
    assert refused.status_code == 403
    assert DENIED in refused.json()["message"]
    assert site.serving("headscale-unbound")


def test_the_account_may_do_nothing_else_and_other_users_are_not_held(site: Site) -> None:
    own = site.pod("headscale-rbac")
    token = site.token(own)
    assert site.as_token(token, "GET", f"{PODS}/headscale-rbac").status_code == 403
    assert site.as_token(token, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets").status_code == 403
    assert (
        site.as_token(token, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps/kube-root-ca.crt").status_code == 403
    )
    assert site.as_token(token, "DELETE", "/api/v1/namespaces/witness/pods/anything").status_code == 403  # RBAC
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
    assert site.as_token(token, "GET", f"{leases}/{FAILSAFE}").status_code == 404  # allowed, not there yet
    assert site.as_token(token, "GET", f"{leases}/another").status_code == 403
    assert site.as_token(token, "GET", leases).status_code == 403
    site.witness.client.delete(f"{PODS}/headscale-rbac")  # the admin: not the policy's business
    assert not site.serving("headscale-rbac")


def _fenced_renewer(site: Site, tmp_path: Path, pod: dict[str, Any], bound_to: dict[str, Any]) -> str:
    """Run ``hold`` with nothing acquired (it fences at once) as ``pod``'s renewer; its log."""
    renewer = new_site(site.witness, tmp_path / "site", "hydra", TEST_TIMING)
    local = tmp_path / "local"
    local.mkdir()
    (local / "token").write_text(site.token(bound_to))
    (local / "ca.crt").write_bytes(site.witness.ca.read_bytes())
    (local / "namespace").write_text(NAMESPACE)
    renewer.env.update(
        {
            "POD_NAME": pod["metadata"]["name"],
            "POD_UID": pod["metadata"]["uid"],
            "LOCAL_API_URL": f"https://127.0.0.1:{site.witness.api_port}",
            "LOCAL_DIR": str(local),
        }
    )
    try:
        assert renewer.run("hold", timeout=30) == 5
        assert renewer.log is not None
        return renewer.log.read_text()
    finally:
        renewer.close()


def test_a_fenced_renewer_deletes_its_own_pod(site: Site, tmp_path: Path) -> None:
    pod = site.pod("headscale-fenced")
    log = _fenced_renewer(site, tmp_path, pod, pod)
    assert "fenced: no lease acquired" in log
    assert "deleting pod headscale-fenced" in log
    assert not site.serving("headscale-fenced")


def test_a_fenced_renewer_never_deletes_a_successor_of_its_name(site: Site, tmp_path: Path) -> None:
    gone = site.pod("headscale-reborn")
    site.witness.client.delete(f"{PODS}/headscale-reborn?gracePeriodSeconds=0")  # gone at once
    successor = site.pod("headscale-reborn")
    log = _fenced_renewer(site, tmp_path, gone, successor)  # even with a token the successor's
    assert f"pod headscale-reborn ({gone['metadata']['uid']}) is gone already" in log
    assert site.witness.client.get(f"{PODS}/headscale-reborn")["metadata"]["uid"] == successor["metadata"]["uid"]
