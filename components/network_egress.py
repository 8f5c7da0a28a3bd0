"""Where a confined workload may connect to, from the `networkPolicy` settings: the cluster DNS, the API server,
the internet, a destination given by name.

A NetworkPolicy names pods (by selectors) or addresses (`ipBlock`), never a DNS name, so every destination the
program knows by name is turned into one of those here:

- an IP literal is that address (`/32`, `/128`);
- an in-cluster Service name (`<service>.<namespace>.svc[.<cluster domain>]`) is the pods of that namespace: the
  connection reaches the Service's endpoints after its DNAT, and policies see the endpoint, not the ClusterIP;
- a name listed in `egressHosts` is the CIDRs listed for it (an IdP or an S3 endpoint on the LAN);
- any other name is "the internet": `egressInternetCidrs` (every address by default) minus the private, CGNAT,
  link-local and unique-local ranges and the sites' cluster ranges, which no internet host has. That keeps the cloud
  metadata service (169.254.169.254, fd00:ec2::254) and every pod and node of the cluster out of it, on every CNI
  (Calico matches an ipBlock against pod addresses too).

The cloud metadata addresses are excepted from every ipBlock rendered here that contains them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from headscale_ha.components.network_policy import Port, Reach, from_namespace, from_pods
from headscale_ha.components.settings import NetworkPolicySettings

DNS_PORT = 53
#: Ranges no internet host has: RFC 1918, CGNAT (the tailnet's own, and some clouds' pod ranges), link-local (the
#: cloud metadata service, NodeLocal DNSCache), unique-local and link-local IPv6 (the tailnet's fd7a:115c:a1e0::/48,
#: AWS's fd00:ec2::254).
NOT_INTERNET = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
    "fe80::/10",
)
#: The cloud metadata service (AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle; AWS over IPv6): it hands out the
#: node's credentials, so no rule ever reaches it.
METADATA = ("169.254.169.254/32", "fd00:ec2::254/128")
_IN_CLUSTER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\..+)?$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def ip_blocks(cidrs: Iterable[str], excepted: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One ipBlock per CIDR, excepting the `excepted` ranges (and the metadata service) that lie strictly inside it.

    The API server refuses an `except` outside its `cidr`, so each block gets only its own; nested excepts are
    collapsed. A CIDR inside an excepted range keeps no except for it: the one who listed it meant it.
    """
    holes = [ipaddress.ip_network(cidr) for cidr in (*excepted, *METADATA)]
    blocks = []
    for cidr in dict.fromkeys(cidrs):
        network = ipaddress.ip_network(cidr)
        inside: list[Network] = [
            hole
            for hole in holes
            if hole.version == network.version and hole != network and hole.subnet_of(network)  # type: ignore[arg-type]
        ]
        block: dict[str, Any] = {"cidr": str(network)}
        if inside:
            block["except"] = [str(hole) for hole in ipaddress.collapse_addresses(inside)]  # type: ignore[arg-type]
        blocks.append({"ipBlock": block})
    return blocks


def internet(settings: NetworkPolicySettings, cluster_ranges: Iterable[str] = ()) -> list[dict[str, Any]]:
    """`egressInternetCidrs` minus everything that is no internet host: NOT_INTERNET and the cluster's ranges."""
    return ip_blocks(settings.egress_internet_cidrs, (*NOT_INTERNET, *cluster_ranges))


def dns_reach(settings: NetworkPolicySettings) -> Reach:
    """UDP and TCP 53 to the cluster DNS pods (and `dnsCidrs`): TCP for answers too long for UDP.

    The pods are named by namespace and labels, not by the kube-dns ClusterIP, which policies never see (they
    match after the DNAT). NodeLocal DNSCache answers on a link-local address (and on the ClusterIP, bound on the
    node without DNAT) from the host network: that is no pod, so those addresses go in `dnsCidrs`.
    """
    pods = from_pods(settings.dns_pod_labels, settings.dns_namespace)
    return Reach(
        ports=(Port(DNS_PORT, "UDP"), Port(DNS_PORT, "TCP")),
        destinations=(pods, *ip_blocks(settings.dns_cidrs)),
        why="name resolution by the cluster DNS",
    )


def api_server_reach(settings: NetworkPolicySettings) -> Reach:
    """The API server's endpoints (`apiServerCidrs`) on `apiServerPort`: the address the `kubernetes` Service's DNAT
    leads to, which is where policies match (the ClusterIP itself is never seen)."""
    if not settings.api_server_cidrs:
        raise ValueError("apiServerCidrs is empty: the API server's endpoints are unknown")
    return Reach(
        ports=(Port(settings.api_server_port),),
        destinations=tuple(ip_blocks(settings.api_server_cidrs)),
        why="the Kubernetes API (the endpoints behind the `kubernetes` Service)",
    )


def url_endpoint(url: str) -> tuple[str, int]:
    """The host and TCP port a URL is fetched from (443 for https, 80 for http, unless the URL names one)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def host_destinations(
    host: str, settings: NetworkPolicySettings, cluster_ranges: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The peers a connection to `host` reaches (see the module docstring); empty when the internet is empty."""
    name = host.rstrip(".").lower().strip("[]")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    if address is not None:
        network = ipaddress.ip_network(address)
        if str(network) in METADATA:
            raise ValueError(f"{host}: the cloud metadata service is never an egress destination")
        return ip_blocks([str(network)])
    in_cluster = _IN_CLUSTER.match(name)
    if in_cluster:
        return [from_namespace(in_cluster["namespace"])]
    if "." not in name:
        return [{"podSelector": {}}]  # a bare Service name: the requesting pod's own namespace
    listed: Mapping[str, list[str]] = settings.egress_hosts
    if name in listed:
        return ip_blocks(listed[name])
    return internet(settings, cluster_ranges)
