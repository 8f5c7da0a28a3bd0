"""Peers and settings the network-policy tests share: the ones at the component's Args (tests/components) and the
ones over whole stacks (tests/program/test_site_network_*.py) evaluate flows from and to the same pods."""

from __future__ import annotations

import ipaddress

from headscale_ha.program.config import StackConfig
from tests.models.netpol.netpol import External, Pod

PROMETHEUS = Pod(namespace="monitoring", labels={"app.kubernetes.io/name": "prometheus"}, ip="10.244.8.8")
OPERATOR = Pod(namespace="cnpg-system", labels={"app.kubernetes.io/name": "cloudnative-pg"}, ip="10.244.9.9")
TAILNET_CLIENT = External(ip="100.64.0.7")
TAILNET_CLIENT_V6 = External(ip="fd7a:115c:a1e0::7")
KUBE_DNS = Pod(namespace="kube-system", labels={"k8s-app": "kube-dns"}, ip="10.244.200.10", name="coredns")
METADATA, METADATA_V6 = External(ip="169.254.169.254"), External(ip="fd00:ec2::254")
API_CIDRS = {"apiServerCidrs": ["10.10.0.0/24"]}
DATABASE = {"stage": "postgres", "postgres": {"instances": 3, "objectStore": {"destinationPath": "s3://wal/hydra"}}}


def api_server(config: StackConfig) -> External:
    """An endpoint of the API server, as the routers reach it after the `kubernetes` Service's DNAT."""
    network = ipaddress.ip_network(config.network_policy.api_server_cidrs[0])
    return External(ip=str(network[0] if network.num_addresses == 1 else network[1]))
