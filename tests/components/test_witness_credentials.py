"""The lease containers' credentials from a stack's kubeconfigs (components/witness_credentials.py): what the script
can use is read, anything else is refused by name without a value shown, and the files the Secrets become take a
real Lease on a real kube-apiserver."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from headscale_ha.components.settings import FailoverSettings
from headscale_ha.components.witness_credentials import (
    ApiCredentials,
    lease_credentials,
    peers_secret_data,
    witness_secret_data,
)
from headscale_ha.components.witness_lease import LeaseWiring, lease_volumes
from tests.support import api_objects as api
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.witness_lab import TEST_TIMING, Witness, new_site
from tests.support.witness_samples import CA_DATA, KEY, PEM, TOKEN, kubeconfig


def test_the_current_context_gives_the_server_the_ca_and_the_token() -> None:
    credentials = lease_credentials(kubeconfig(), key=KEY)
    assert credentials == ApiCredentials(api_url="https://witness.example.com:6443", ca_crt=PEM, token=TOKEN)
    assert TOKEN not in repr(credentials)
    assert witness_secret_data(credentials) == {"token": TOKEN, "ca.crt": PEM}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (kubeconfig(server="http://witness.example.com:6443"),
         "cluster.server: must be an https URL such as https://api.example.com:6443"),
        (kubeconfig(cluster={"server": "https://w:6443", "certificate-authority-data": CA_DATA,
                             "insecure-skip-tls-verify": True}),
         "cluster.insecure-skip-tls-verify: cannot be used by the lease containers: the token would travel to an "
         "unverified server; give certificate-authority-data"),
        (kubeconfig(cluster={"server": "https://10.0.0.1:6443", "certificate-authority-data": CA_DATA,
                             "tls-server-name": "kubernetes"}),
         "cluster.tls-server-name: cannot be used by the lease containers"),
        (kubeconfig(cluster={"server": "https://w:6443", "certificate-authority": "/home/me/.kube/ca.crt"}),
         "cluster.certificate-authority: cannot be used by the lease containers: a file on your machine is not in "
         "the pod"),
        (kubeconfig(cluster={"server": "https://w:6443"}), "cluster.certificate-authority-data: is required"),
        (kubeconfig(cluster={"server": "https://w:6443", "certificate-authority-data": "not base64!"}),
         "cluster.certificate-authority-data: must be base64 of a PEM bundle"),
        (kubeconfig(user={"client-certificate-data": "Y2VydA==", "client-key-data": TOKEN}),
         "user.token: is required (it has client-certificate-data, client-key-data): the lease script "
         "authenticates with a bearer token only"),
        (kubeconfig(user={"exec": {"command": "aws"}}), "user.token: is required (it has exec)"),
        (kubeconfig(user={"token": f"{TOKEN} {TOKEN}"}),
         "user.token: must be one bearer token, without spaces or control characters"),
        (kubeconfig(current=None), "current-context: must name the context the lease containers use"),
        (kubeconfig(current="elsewhere"), "contexts: no entry named as current-context says"),
        (kubeconfig().replace("cluster: witness", "cluster: gone"),
         "clusters: no entry named as the current context's cluster says"),
        (f"token: {TOKEN}\n  bad: [", "kubeconfig: not valid YAML"),
    ],
)  # fmt: skip
def test_what_the_script_cannot_use_is_refused_by_name_and_no_value_is_shown(document: str, expected: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(f'{KEY}: {expected}')}") as refused:
        lease_credentials(document, key=KEY)
    message = str(refused.value)
    for secret in (TOKEN, CA_DATA, "Y2VydA=="):
        assert secret not in message


def test_the_peers_secret_has_every_key_the_peers_volume_mounts() -> None:
    credentials = ApiCredentials(api_url="https://cosmos.example.com:6443", ca_crt=PEM, token=TOKEN)
    data = peers_secret_data({"cosmos": (credentials, "headscale")})
    wiring = LeaseWiring(site="hydra", failover=FailoverSettings(), witness_api_url="https://w:6443",
                         witness_secret="w", peers_secret="p", peers=("cosmos",), image="curl",
                         script_config_map="s", serve_from="/etc/headscale", serve_from_mounts=(),
                         resources={})  # fmt: skip
    peers = next(volume for volume in api.volume(lease_volumes(wiring)) if volume["name"] == "lease-peers")
    assert sorted(item["key"] for item in peers["secret"]["items"]) == sorted(data)
    assert data["cosmos.namespace"] == "headscale"
    assert data["cosmos.api-url"] == "https://cosmos.example.com:6443"


@pytest.mark.real_tool("curl", *LAB_TOOLS)
def test_the_witness_secret_as_mounted_takes_the_lease_on_a_real_api_server(witness: Witness, tmp_path: Path) -> None:
    """A kubeconfig of a site's ServiceAccount token (the lab binds it to the product's lease Role): read, written
    as the Secret's files, and given to the gate as its TOKEN_FILE and CA_FILE, it takes the Lease."""
    witness.release()
    site = new_site(witness, tmp_path / "hydra", "hydra", TEST_TIMING)
    try:
        ca_data = base64.b64encode(witness.ca.read_bytes()).decode()
        document = kubeconfig(server=f"https://127.0.0.1:{site.proxy.port}/", ca_data=ca_data,
                              user={"token": (site.root / "token").read_text()})  # fmt: skip
        credentials = lease_credentials(document, key=KEY)
        mounted = tmp_path / "witness-secret"
        mounted.mkdir()
        for name, value in witness_secret_data(credentials).items():
            (mounted / name).write_text(value)
        site.env |= {"API_URL": credentials.api_url, "TOKEN_FILE": str(mounted / "token"),
                     "CA_FILE": str(mounted / "ca.crt")}  # fmt: skip
        assert site.run("acquire") == 0, site.log.read_text() if site.log else ""
        assert witness.lease()["spec"]["holderIdentity"] == "hydra/headscale-0"
    finally:
        site.close()
