"""Pure renderers for the gateway services: the split-DNS hosts file and Corefile, and the tailnet kubeconfig.

Everything here is text in, text out (no Pulumi, no I/O), so the rules can be tested exhaustively.

How the Corefile (CoreDNS 1.12) makes the split-DNS zone authoritative, and why it looks the way it does:

- CoreDNS runs the plugins of a server block in the order compiled into the binary (``plugin.cfg``), not the order
  they are written in. ``template`` runs before ``hosts`` there, so a catch-all NXDOMAIN template in the same block
  as ``hosts`` would answer every name, including the ones in the hosts file.
- ``hosts`` without ``fallthrough`` answers a name it does not know in its zone with SERVFAIL (it has no SOA to
  build an NXDOMAIN from). SERVFAIL makes clients retry and cannot be cached, so a typo looks like an outage.
- So the zone block uses ``hosts`` with ``fallthrough`` limited to the zone, and the only plugin after it is a
  ``forward`` to a second server block for the same zone that listens on loopback only and answers from templates:
  the SOA at the apex, NODATA (with the SOA) for other types at the apex, and NXDOMAIN (with the SOA, so resolvers
  cache it for ``ttl`` seconds) for every other name. Nothing in the zone is ever sent to an upstream resolver:
  the upstream ``forward`` lives only in the optional ``.`` block, which CoreDNS never picks for names in the zone.
- Limitation: an empty non-terminal (``b.<zone>`` when only ``a.b.<zone>`` is in the hosts file) gets NXDOMAIN,
  not NODATA; keep the zone's names one label deep (``<name>.<zone>``) or accept that.
"""

from __future__ import annotations

import copy
import ipaddress
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from headscale_ha.components.kubeconfig import load_kubeconfig, server_parts

__all__ = [
    "HEALTH_PORT",
    "NXDOMAIN_PORT",
    "READY_PORT",
    "TAILNET_IPV4",
    "TAILNET_IPV6",
    "TAILSCALE_SERVICE_IPS",
    "render_corefile",
    "render_hosts",
    "rewrite_kubeconfig",
    "tailnet_addresses",
]

#: Where the probes look: ``health`` answers ``/health`` here (liveness), ``ready`` answers ``/ready`` (readiness).
HEALTH_PORT = 8080
READY_PORT = 8181
#: Loopback port of the block that answers negative responses for the zone (see the module docstring).
NXDOMAIN_PORT = 5301

#: Every address Tailscale clients accept for a node; Headscale's configured prefixes must lie inside these.
TAILNET_IPV4 = ipaddress.IPv4Network("100.64.0.0/10")
TAILNET_IPV6 = ipaddress.IPv6Network("fd7a:115c:a1e0::/48")
#: Tailscale's own service addresses (MagicDNS): inside the ranges above but never a node's address.
TAILSCALE_SERVICE_IPS = frozenset({ipaddress.ip_address("100.100.100.100"), ipaddress.ip_address("fd7a:115c:a1e0::53")})

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_SAFE_PATH = re.compile(r"/[A-Za-z0-9._/-]+")


# --------------------------------------------------------------------------------------------- validation


def _dns_name(value: object, *, what: str) -> str:
    """A lowercase DNS name without a trailing dot: the only spelling that compares equal to itself."""
    if not isinstance(value, str):
        raise ValueError(f"{what}: must be a string, got {type(value).__name__}")
    labels = value.split(".")
    if len(value) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{what}: {value!r} is not a lowercase DNS name (labels of a-z, 0-9 and '-', no trailing dot)")
    return value


def _port(value: object, *, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{what}: {value!r} is not a port number (1-65535)")
    return value


def _answerable_ip(value: object, *, what: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address a client can actually reach: unspecified and multicast addresses are always a mistake here."""
    if not isinstance(value, str):
        raise ValueError(f"{what}: must be an IP address string, got {type(value).__name__}")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not an IP address") from None
    if address.is_unspecified or address.is_multicast:
        raise ValueError(f"{what}: {value!r} is not a unicast address")
    return address


# --------------------------------------------------------------------------------------------- hosts file


def render_hosts(records: Mapping[str, str]) -> str:
    """Render the hosts file (``<ip> <fqdn>`` per line) the CoreDNS ``hosts`` plugin serves for the zone.

    Sorted by name so the ConfigMap only changes when a record does. Every name must be a lowercase DNS name and
    every address a unicast IP; a mistake raises ValueError naming the record instead of a silently skipped line
    (CoreDNS ignores lines it cannot parse).
    """
    if not isinstance(records, Mapping):
        raise ValueError(f"records: must be a mapping of name to IP, got {type(records).__name__}")
    addresses: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for name, ip in records.items():
        # 'a.zone.' and 'a.zone' are one DNS name: accept the absolute spelling, then insist both agree.
        spelled = name[:-1] if isinstance(name, str) and name.endswith(".") else name
        fqdn = _dns_name(spelled, what=f"records[{name!r}]")
        address = _answerable_ip(ip, what=f"records[{name!r}]")
        previous = addresses.setdefault(fqdn, address)
        if previous != address:
            raise ValueError(f"records[{name!r}]: {fqdn} is given twice, as {previous} and as {address}")
    lines = ["# Split-DNS hosts for the CoreDNS hosts plugin; rendered by headscale-ha, do not edit."]
    lines += [f"{addresses[name]} {name}" for name in sorted(addresses)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- Corefile


def _upstream_targets(upstream: Sequence[str]) -> list[str]:
    if isinstance(upstream, str):
        raise ValueError("upstream: must be a sequence of IP addresses, not one string")
    targets: list[str] = []
    for index, value in enumerate(upstream):
        address = _answerable_ip(value, what=f"upstream[{index}]")
        target = f"[{address}]:53" if address.version == 6 else str(address)
        if target in targets:
            raise ValueError(f"upstream[{index}]: {value!r} is listed twice")
        targets.append(target)
    return targets


def render_corefile(
    *,
    zone: str,
    hosts_path: str = "/etc/coredns/hosts/hosts",
    upstream: Sequence[str] = (),
    ttl: int = 60,
    port: int = 53,
    log_queries: bool = False,
    nxdomain_port: int = NXDOMAIN_PORT,
    metrics_port: int | None = None,
) -> str:
    """Render a CoreDNS 1.12 Corefile serving ``zone`` authoritatively from the hosts file at ``hosts_path``.

    Names in the hosts file get their address (re-read every 5 s, so a ConfigMap update needs no restart); any
    other name in the zone gets an authoritative NXDOMAIN with the zone's SOA (see the module docstring for why
    that takes a second, loopback-only server block on ``nxdomain_port``). With ``upstream`` a ``.`` block forwards
    every other name to those resolvers; without it CoreDNS refuses names outside the zone. Deterministic text.
    """
    zone = _dns_name(zone, what="zone")
    _check_hosts_path(hosts_path)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= 86400:
        raise ValueError(f"ttl: {ttl!r} must be a whole number of seconds from 1 to 86400")
    port, nxdomain_port = _listen_ports(port, nxdomain_port)
    targets = _upstream_targets(upstream)
    log = ["    log"] if log_queries else []
    lines = [
        "# Rendered by headscale-ha; do not edit.",
        f"# Split-DNS zone {zone}: names from the hosts file, NXDOMAIN for the rest, never sent upstream.",
        f"{zone}:{port} {{",
        "    errors",
        *log,
        f"    health :{HEALTH_PORT} {{",
        "        lameduck 5s",
        "    }",
        f"    ready :{READY_PORT}",
        *([f"    prometheus :{metrics_port}"] if metrics_port is not None else []),
        f"    cache {ttl}",
        "    loop",
        f"    hosts {hosts_path} {zone} {{",
        f"        ttl {ttl}",
        "        reload 5s",
        "        no_reverse",
        # Limited to the zone and followed only by the forward to the loopback block below: 'template' runs before
        # 'hosts' in CoreDNS, and 'hosts' alone answers unknown names with SERVFAIL, so this is the way to NXDOMAIN.
        f"        fallthrough {zone}",
        "    }",
        f"    forward . 127.0.0.1:{nxdomain_port}",
        "}",
        "",
        *_negative_answers_block(zone, ttl, nxdomain_port),
    ]
    if targets:
        lines += [
            "",
            "# Everything outside the zone goes to the upstream resolvers.",
            f".:{port} {{",
            "    errors",
            *log,
            f"    cache {ttl}",
            "    loop",
            f"    forward . {' '.join(targets)}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def _check_hosts_path(hosts_path: str) -> None:
    if (
        not isinstance(hosts_path, str)
        or not _SAFE_PATH.fullmatch(hosts_path)
        or posixpath.normpath(hosts_path) != hosts_path
        or "/." in hosts_path
    ):
        raise ValueError(f"hosts_path: {hosts_path!r} must be a normalised absolute path of [A-Za-z0-9._-] parts")


def _listen_ports(port: int, nxdomain_port: int) -> tuple[int, int]:
    """The zone's port and the loopback block's, checked: port numbers, apart from each other and from the health
    and ready endpoints."""
    port = _port(port, what="port")
    nxdomain_port = _port(nxdomain_port, what="nxdomain_port")
    taken = {HEALTH_PORT: "the health endpoint", READY_PORT: "the ready endpoint"}
    for what, value in (("port", port), ("nxdomain_port", nxdomain_port)):
        if value in taken:
            raise ValueError(f"{what}: {value} is already used by {taken[value]}")
        taken[value] = what
    return port, nxdomain_port


def _negative_answers_block(zone: str, ttl: int, nxdomain_port: int) -> list[str]:
    """The loopback-only server block for ``zone`` that answers from templates: the SOA at the apex, NODATA (with
    the SOA) for other types there, NXDOMAIN (with the SOA, cached for ``ttl``) for every other name."""
    soa = f"{zone}. {ttl} IN SOA ns.{zone}. hostmaster.{zone}. 1 7200 1800 86400 {ttl}"
    apex = "^" + "[.]".join(zone.split(".")) + "[.]$"
    return [
        f"# Negative answers for {zone}, reached only through the forward above (loopback only).",
        f"{zone}:{nxdomain_port} {{",
        "    bind 127.0.0.1",
        "    errors",
        f"    template IN SOA {zone} {{",
        f"        match {apex}",
        f'        answer "{soa}"',
        "        fallthrough",
        "    }",
        f"    template ANY ANY {zone} {{",
        f"        match {apex}",
        f'        authority "{soa}"',
        "        fallthrough",
        "    }",
        f"    template ANY ANY {zone} {{",
        "        rcode NXDOMAIN",
        f'        authority "{soa}"',
        "    }",
        "}",
    ]


# --------------------------------------------------------------------------------------------- kubeconfig


def _gateway(gateway_ip: object, port: object) -> str:
    address = _answerable_ip(gateway_ip, what="gateway_ip")
    if address in TAILNET_IPV4 or address in TAILNET_IPV6:
        raise ValueError(
            f"gateway_ip: {address} is a tailnet node address; use the gateway Service's stable LB IP instead"
        )
    host = f"[{address}]" if address.version == 6 else str(address)
    return f"https://{host}:{_port(port, what='port')}"


def rewrite_kubeconfig(kubeconfig: str, *, gateway_ip: str, port: int = 6443) -> str:
    """Point every cluster of an admin kubeconfig at the gateway's stable IP, keeping TLS verification intact.

    Each ``server`` becomes ``https://<gateway_ip>:<port>`` (any path kept) and ``tls-server-name`` is set to the
    name the API server certificate was checked against before: an existing ``tls-server-name``, otherwise the
    original server's host. When that host is an IP, the API server certificate must carry it as an IP SAN
    (Talos and kubeadm certificates include the endpoint/VIP they were issued for). CA data, users, contexts and
    everything else pass through unchanged.

    The input is a secret upstream: a bad document raises ValueError naming the field (``clusters[0].cluster.server``)
    and never quoting any value or the document.
    """
    gateway = _gateway(gateway_ip, port)
    document = copy.deepcopy(load_kubeconfig(kubeconfig))
    for index, entry in enumerate(document["clusters"]):
        cluster: dict[str, Any] = entry["cluster"]
        host, path = server_parts(cluster.get("server"), where=f"clusters[{index}].cluster.server")
        tls_name = cluster.get("tls-server-name", host)
        if not isinstance(tls_name, str) or not tls_name:
            raise ValueError(f"clusters[{index}].cluster.tls-server-name: must be a non-empty string")
        # Rebuild in place so 'tls-server-name' sits right after 'server' in the output.
        rewritten: dict[str, Any] = {}
        for key, value in cluster.items():
            if key == "tls-server-name":
                continue
            rewritten[key] = value
            if key == "server":
                rewritten["server"] = gateway + path
                rewritten["tls-server-name"] = tls_name
        entry["cluster"] = rewritten
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


# --------------------------------------------------------------------------------------------- tailnet addresses

_IPV4_CANDIDATE = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?!\d|\.\d)(?:/(\d{1,3})(?!\d))?")
_IPV6_CANDIDATE = re.compile(r"(?<![0-9A-Za-z])([0-9A-Fa-f:]*:[0-9A-Fa-f:]*:[0-9A-Fa-f:]*)(?:/(\d{1,3})(?!\d))?")


def _parse_candidate(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    # An IPv6 run may pick up a separator colon on either side ("host:fd7a::1", "fd7a::1:" before a port).
    for option in (text, text.rstrip(":"), text.lstrip(":"), text.strip(":")):
        try:
            return ipaddress.ip_address(option)
        except ValueError:
            continue
    return None


def _is_node_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address, prefix: str | None) -> bool:
    if address not in TAILNET_IPV4 and address not in TAILNET_IPV6:
        return False
    if address in TAILSCALE_SERVICE_IPS:
        return False
    if prefix is None or int(prefix) == address.max_prefixlen:
        return True
    # "100.64.0.0/10" is a range, not a node; "100.64.0.7/10" is interface notation for the node 100.64.0.7.
    try:
        ipaddress.ip_network(f"{address}/{prefix}", strict=True)
    except ValueError:
        return True
    return False


def tailnet_addresses(text: str) -> list[str]:
    """Tailnet node addresses (per-replica IPs) found in ``text``, in order of first appearance, without repeats.

    Used by tests across the project to prove that nothing (split DNS, kubeconfig, manifests) points at a
    subnet router's own tailnet IP, which changes whenever a replica is re-created. Whole ranges
    (``100.64.0.0/10``) and Tailscale's service address ``100.100.100.100`` are not node addresses; a host
    prefix (``/32``, ``/128``) or interface notation (``100.64.0.7/10``) is.
    """
    found: list[tuple[int, str]] = []
    for pattern in (_IPV4_CANDIDATE, _IPV6_CANDIDATE):
        for match in pattern.finditer(text):
            address = _parse_candidate(match.group(1))
            if address is not None and _is_node_address(address, match.group(2)):
                found.append((match.start(), str(address)))
    seen: dict[str, None] = {}
    for _, address in sorted(found):
        seen.setdefault(address, None)
    return list(seen)
