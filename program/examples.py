"""The shipped example values a real deployment must replace.

The files describe a made-up tailnet: names under the domains reserved for examples (RFC 2606 and RFC 6761:
``example.com``/``.net``/``.org``, ``.example``, ``.invalid``, ``.test``) and addresses from the documentation
ranges (RFC 5737: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24). None of them can work for a real tailnet, so
every `pulumi preview` and `pulumi up` warns, naming each key that still holds one, and `make plan` prints it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse

from headscale_ha.components.settings import PROJECT
from headscale_ha.program.config import StackConfig

_EXAMPLE_DOMAINS = ("example.com", "example.net", "example.org", "example", "invalid", "test")
_DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(block) for block in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)


def is_example_name(name: str) -> bool:
    """A host name (or an e-mail's domain) under a domain reserved for examples."""
    host = name.rsplit("@", 1)[-1].rstrip(".").lower()
    return any(host == domain or host.endswith(f".{domain}") for domain in _EXAMPLE_DOMAINS)


def is_documentation_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _DOCUMENTATION_NETWORKS if network.version == ip.version)


def example_values(config: StackConfig) -> list[str]:
    """``<key>: <value>`` for every key of this stack that still holds a shipped example value."""
    tailnet = config.tailnet
    found = [
        (key, value)
        for key, value in (
            ("tailnet.publicHostname", tailnet.public_hostname),
            ("tailnet.baseDomain", tailnet.base_domain),
            ("tailnet.internalDomain", tailnet.internal_domain),
        )
        if is_example_name(value)
    ]
    found += [
        (f"tailnet.users[{user.name}].email", user.email)
        for user in tailnet.users
        if user.email and is_example_name(user.email)
    ]
    found += [
        (f"tailnet.sites[{site.name}].publicAddress", site.public_address)
        for site in tailnet.sites
        if site.public_address and is_documentation_address(site.public_address)
    ]
    nfs = config.backup.nfs
    if nfs is not None and nfs.server and (is_example_name(nfs.server) or is_documentation_address(nfs.server)):
        found.append(("backup.nfs.server", nfs.server))
    runbook = config.monitoring.runbook_url
    if config.monitoring.enabled and runbook and is_example_name(urlparse(runbook).hostname or ""):
        found.append(("monitoring.runbookUrl", runbook))
    return [f"{PROJECT}:{key}: {value}" for key, value in found]


def reserved_for(value: str) -> str:
    """Which reservation a flagged value falls under, in the words of the RFC that makes it."""
    if is_documentation_address(value):
        return "documentation address, RFC 5737/3849"
    host = (urlparse(value).hostname or "") if "://" in value else value.rsplit("@", 1)[-1]
    if host.rstrip(".").lower().endswith((".test", ".invalid")) or host.lower() in ("test", "invalid"):
        return "testing name, RFC 6761: never resolvable on the internet"
    return "example name, RFC 2606"


def warning(config: StackConfig) -> str | None:
    """One warning naming every value reserved for documentation or testing, one per line, or None when there is
    none. It does not say where a value came from: a lab may pick `.test` names on purpose."""
    found = example_values(config)
    if not found:
        return None
    lines = [
        f"{len(found)} value(s) reserved for documentation or testing are set; clients on the internet cannot reach "
        "them (docs/installation.md, step 2):"
    ]
    lines += [f"  {entry} (reserved: {reserved_for(entry.split(': ', 1)[1])})" for entry in found]
    return "\n".join(lines)
