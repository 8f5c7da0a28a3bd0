"""Deterministic render of the tailnet policy: the base policy from Git plus what each site's routers need.

The same inputs give byte-identical text and hash whatever the order of the sites, of their routes or of the
keys in the base, so the policy resource only sees a diff when the policy really changed. Per site the render
adds the router tag, the gateway host, the route auto-approvals and one ACL rule (see :func:`render_policy`),
then validates the result for the target Headscale minor (on 0.28 IP grants are converted to ACLs first).
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from headscale_ha.policy.check import check_policy, policy_object
from headscale_ha.policy.evaluate import PolicyTestOutcome
from headscale_ha.policy.grant_conversion import grants_to_acls
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.normalise import normalise_keys
from headscale_ha.policy.problems import PolicyError, PolicyLint, PolicyProblem, format_path
from headscale_ha.policy.schema import policy_document
from headscale_ha.policy.values import IpNetwork, overlapping_tailnet_range, parse_network
from headscale_ha.policy.versions import headscale_minor

__all__ = ["RenderedPolicy", "SiteRoutes", "gateway_host", "render_policy", "router_tag"]

_SITE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def router_tag(site: str) -> str:
    """The tag a site's subnet routers join with (their pre-auth key carries it)."""
    return f"tag:subnet-router-{site}"


def gateway_host(site: str) -> str:
    """The hosts entry naming a site's gateway IP, for base rules such as ``gateway-hydra:6443``."""
    return f"gateway-{site}"


def _site_path(name: str, *parts: str | int) -> str:
    return f"sites[{json.dumps(name)}]" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _route_key(network: IpNetwork) -> tuple[int, int, int]:
    return (network.version, int(network.network_address), network.prefixlen)


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteRoutes:
    """A site as the policy sees it: its name, its gateway IP and every CIDR its subnet routers advertise
    (cluster CIDRs plus the LB pool that holds the gateway IP). Checked on construction."""

    name: str
    gateway_ip: str
    routes: tuple[str, ...]

    def __post_init__(self) -> None:
        problems: list[PolicyProblem] = []
        name = self.name if isinstance(self.name, str) else repr(self.name)
        if not isinstance(self.name, str) or not _SITE_RE.match(self.name):
            problems.append(PolicyProblem(_site_path(name, "name"), "a site name is a lower-case DNS label"))
        if isinstance(self.routes, str):
            problems.append(PolicyProblem(_site_path(name, "routes"), "routes is a sequence of CIDRs, not one string"))
        else:
            object.__setattr__(self, "routes", tuple(self.routes))
        networks: list[IpNetwork] = []
        if not self.routes or isinstance(self.routes, str):
            problems.append(PolicyProblem(_site_path(name, "routes"), "a site advertises at least one route"))
        else:
            for index, route in enumerate(self.routes):
                try:
                    networks.append(_site_route(route))
                except ValueError as exc:
                    problems.append(PolicyProblem(_site_path(name, "routes", index), str(exc)))
        try:
            if not isinstance(self.gateway_ip, str) or "/" in self.gateway_ip:
                raise ValueError(f"{self.gateway_ip!r} is not an IP address")
            gateway = parse_network(self.gateway_ip)
        except ValueError as exc:
            problems.append(PolicyProblem(_site_path(name, "gateway_ip"), str(exc)))
        else:
            if networks and not any(_within(gateway, network) for network in networks):
                problems.append(
                    PolicyProblem(
                        _site_path(name, "gateway_ip"),
                        f"{self.gateway_ip} is outside every route of the site: nobody could reach the gateway",
                    )
                )
        if problems:
            raise PolicyError(problems)

    def networks(self) -> list[IpNetwork]:
        """The routes, deduplicated and in canonical order."""
        return sorted({parse_network(route) for route in self.routes}, key=_route_key)


def _site_route(text: str) -> IpNetwork:
    if not isinstance(text, str) or "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR")
    network = parse_network(text)
    if network.prefixlen == 0:
        raise ValueError(f"{text} is a default route: exit nodes are not site routes")
    if (tailnet := overlapping_tailnet_range(network)) is not None:
        raise ValueError(f"{text} overlaps the tailnet range {tailnet}")
    return network


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderedPolicy:
    """The policy to apply: canonical JSON text, the same as a document, its SHA-256 and the Headscale minor;
    with the lints of the policy (findings in a policy Headscale accepts, to print in a plan) and, on 0.29, the
    offline outcome of its ``tests``/``sshTests`` (a failing one is a render error, as 0.29 refuses the write).
    Lints and test outcomes do not take part in equality: the same bytes are the same policy."""

    text: str
    document: dict[str, Any]
    sha256: str
    version: str
    lints: tuple[PolicyLint, ...] = field(default=(), compare=False)
    test_outcomes: tuple[PolicyTestOutcome, ...] = field(default=(), compare=False)


def render_policy(
    base_text: str,
    *,
    sites: Sequence[SiteRoutes],
    version: str,
    router_tag_owner: str = "group:admins",
) -> RenderedPolicy:
    """Render the base policy for a Headscale minor, with per site:

    - ``tagOwners["tag:subnet-router-<site>"] = [router_tag_owner]``
    - ``hosts["gateway-<site>"] = "<gateway_ip>/32"`` (``/128`` for IPv6)
    - ``autoApprovers.routes[<cidr>] = ["tag:subnet-router-<site>"]`` for every route
    - one ACL rule ``router_tag_owner → <every route>:*``, appended after the base rules (sites by name), unless
      the base has neither ``acls`` nor ``grants``: it then allows everything and one rule would deny the rest.

    Why that rule: the routes serve nobody until a rule reaches them, and only the render knows a stack's CIDRs.
    Its principal is the router tag's owner because that owner can already put a router under the tag and so
    carry traffic for those CIDRs; the rule hands out no power it does not have. Anyone else is granted access
    in the base (which may use ``gateway-<site>`` hosts).

    A base entry with one of those keys defined differently, a site routing what another site routes, or a
    result the model refuses, raises :class:`PolicyError` with the path of the problem.
    """
    minor = headscale_minor(version)
    base = policy_object(load_hujson(base_text))
    base, key_lints = normalise_keys(base, version=minor)  # "TagOwners" is "tagOwners" to Headscale, and here
    merged = _merge(base, _ordered_sites(sites), router_tag_owner)
    if minor == "0.28" and "grants" in merged:
        checked = check_policy(merged, version="0.29")
        policy = grants_to_acls(checked.policy, version=minor)
        converted = check_policy(policy_document(policy), version=minor)
        lints = _unique([*checked.lints, *converted.lints])
    else:
        checked = check_policy(merged, version=minor)
        policy, lints = checked.policy, list(checked.lints)
    text = json.dumps(_canonical(policy_document(policy)), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return RenderedPolicy(
        text=text,
        document=json.loads(text),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        version=minor,
        lints=tuple(_unique([*key_lints, *lints])),
        test_outcomes=checked.test_outcomes if minor != "0.28" else (),
    )


def _unique(lints: list[PolicyLint]) -> list[PolicyLint]:
    return list(dict.fromkeys(lints))


def _ordered_sites(sites: Sequence[SiteRoutes]) -> list[SiteRoutes]:
    """Sites by name; two sites with one name, or routes claimed by two sites, are refused."""
    problems: list[PolicyProblem] = []
    for site in sites:
        if not isinstance(site, SiteRoutes):
            raise TypeError(f"sites holds SiteRoutes, not {type(site).__name__}")
    ordered = sorted(sites, key=lambda site: site.name)
    for previous, site in itertools.pairwise(ordered):
        if previous.name == site.name:
            problems.append(PolicyProblem(_site_path(site.name), "two sites have this name"))
    for position, site in enumerate(ordered):
        for other in ordered[:position]:
            if other.name == site.name:
                continue
            for index, route in enumerate(site.routes):
                for theirs in other.routes:
                    if parse_network(route).overlaps(parse_network(theirs)):
                        problems.append(
                            PolicyProblem(
                                _site_path(site.name, "routes", index),
                                f"{route} overlaps {theirs} of site {other.name!r}: both sites' routers would "
                                "claim it and clients could be routed to the wrong cluster",
                            )
                        )
    if problems:
        raise PolicyError(problems)
    return ordered


def _object(container: dict[str, Any], key: str, path: list[str], problems: list[PolicyProblem]) -> dict[str, Any]:
    value = container.setdefault(key, {})
    if not isinstance(value, dict):
        problems.append(PolicyProblem(format_path([*path, key]), "must be a JSON object for the render to add to it"))
        return {}
    return value


def _merge(base: dict[str, Any], sites: list[SiteRoutes], owner: str) -> dict[str, Any]:
    document = copy.deepcopy(base)
    if not sites:
        return document
    problems: list[PolicyProblem] = []
    tag_owners = _object(document, "tagOwners", [], problems)
    hosts = _object(document, "hosts", [], problems)
    approvers = _object(document, "autoApprovers", [], problems)
    routes = _object(approvers, "routes", ["autoApprovers"], problems) if "autoApprovers" in document else {}
    access = "acls" in document or "grants" in document
    acls = document.setdefault("acls", []) if access else []
    if not isinstance(acls, list):
        problems.append(PolicyProblem("acls", "must be a JSON array for the render to add to it"))
    if problems:
        raise PolicyError(problems)
    for site in sites:
        tag = router_tag(site.name)
        _own_router_tag(tag_owners, tag, owner, problems)
        _set_gateway_host(hosts, site, problems)
        networks = site.networks()
        _approve_routes(routes, networks, site.name, tag, problems)
        rule = {"action": "accept", "src": [owner], "dst": [f"{network}:*" for network in networks]}
        if access and rule not in acls:
            acls.append(rule)
    if problems:
        raise PolicyError(problems)
    return document


def _own_router_tag(tag_owners: dict[str, Any], tag: str, owner: str, problems: list[PolicyProblem]) -> None:
    """The site's router tag, owned by ``owner`` only; the base may define it only that way."""
    if tag not in tag_owners:
        tag_owners[tag] = [owner]
    elif not (isinstance(tag_owners[tag], list) and set(tag_owners[tag]) == {owner}):
        problems.append(
            PolicyProblem(
                format_path(["tagOwners", tag]),
                f"the render owns this tag and sets its owners to [{owner!r}]; the base defines "
                f"{tag_owners[tag]!r}: remove it from the base or render with that router_tag_owner",
            )
        )


def _set_gateway_host(hosts: dict[str, Any], site: SiteRoutes, problems: list[PolicyProblem]) -> None:
    """The ``gateway-<site>`` host at the site's gateway IP; the base may define it only as the same network."""
    host, gateway = gateway_host(site.name), str(parse_network(site.gateway_ip))
    if host not in hosts or _network_or_none(hosts[host]) == parse_network(gateway):
        hosts[host] = gateway
    else:
        problems.append(
            PolicyProblem(
                format_path(["hosts", host]),
                f"the render owns this host and sets it to {gateway!r} (site {site.name!r}); the base defines "
                f"{hosts[host]!r}",
            )
        )


def _approve_routes(
    routes: dict[str, Any], networks: list[IpNetwork], site: str, tag: str, problems: list[PolicyProblem]
) -> None:
    """Each route of the site approved for its router tag only; a base entry for the same network must agree."""
    for network in networks:
        key = next((k for k in routes if _network_or_none(k) == network), None)
        if key is None:
            routes[str(network)] = [tag]
        elif not (isinstance(routes[key], list) and set(routes[key]) == {tag}):
            problems.append(
                PolicyProblem(
                    format_path(["autoApprovers", "routes", key]),
                    f"a route of site {site!r}: the render approves it with [{tag!r}] only; the base "
                    f"defines {routes[key]!r}",
                )
            )


def _network_or_none(text: Any) -> IpNetwork | None:
    try:
        return ipaddress.ip_network(text, strict=False) if isinstance(text, str) else None
    except ValueError:
        return None


def _canonical(document: dict[str, Any]) -> dict[str, Any]:
    """Sort and deduplicate the lists whose order means nothing (members, owners, approvers); keep rule order."""
    document = copy.deepcopy(document)
    for members in (document.get("groups") or {}).values():
        members[:] = sorted(set(members))
    for owners in (document.get("tagOwners") or {}).values():
        owners[:] = sorted(set(owners))
    approvers = document.get("autoApprovers") or {}
    for route_approvers in (approvers.get("routes") or {}).values():
        route_approvers[:] = sorted(set(route_approvers))
    if "exitNode" in approvers:
        approvers["exitNode"] = sorted(set(approvers["exitNode"]))
    return document


def _within(inner: IpNetwork, outer: IpNetwork) -> bool:
    """``inner`` lies in ``outer``; never across address families (``subnet_of`` raises on a mix)."""
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False
