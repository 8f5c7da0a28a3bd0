"""Policy render: what it adds per site, conflicts with the base, site checks, and that the same inputs give the
same bytes whatever their order."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headscale_ha.policy.check import parse_policy
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.render import RenderedPolicy, SiteRoutes, render_policy

BASE_TEXT = (Path(__file__).resolve().parents[2] / "policy" / "base.hujson").read_text()
VERSIONS = ("0.28", "0.29")

HYDRA = SiteRoutes(
    name="hydra", gateway_ip="172.30.250.10", routes=("10.244.0.0/16", "10.96.0.0/16", "172.30.250.0/28")
)
COSMOS = SiteRoutes(
    name="cosmos", gateway_ip="172.31.250.10", routes=("10.245.0.0/16", "10.97.0.0/16", "172.31.250.0/28")
)
SITES = (HYDRA, COSMOS)


def base(**extra: Any) -> str:
    """A small base policy as JSON text; keyword arguments replace or add top-level keys (None removes one)."""
    document: dict[str, Any] = {
        "groups": {"group:admins": ["alice@"], "group:ops": ["bob@"]},
        "tagOwners": {"tag:server": ["group:admins"]},
        "acls": [{"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:server:22"]}],
    }
    document.update(extra)
    return json.dumps({k: v for k, v in document.items() if v is not None})


def render_problems(text: str, version: str = "0.29", sites: tuple[SiteRoutes, ...] = SITES, **kw: Any) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        render_policy(text, sites=sites, version=version, **kw)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize("version", VERSIONS)
def test_shipped_base_renders_canonical_json(version: str) -> None:
    rendered = render_policy(BASE_TEXT, sites=SITES, version=version)
    assert rendered.version == version
    assert rendered.text == json.dumps(rendered.document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert rendered.sha256 == hashlib.sha256(rendered.text.encode()).hexdigest()
    parse_policy(rendered.text, version=version)


def test_render_adds_the_site_entries() -> None:
    document = render_policy(BASE_TEXT, sites=SITES, version="0.29").document
    assert document["tagOwners"]["tag:subnet-router-hydra"] == ["group:admins"]
    assert document["tagOwners"]["tag:subnet-router-cosmos"] == ["group:admins"]
    assert document["hosts"]["gateway-hydra"] == "172.30.250.10/32"
    assert document["hosts"]["gateway-cosmos"] == "172.31.250.10/32"
    routes = document["autoApprovers"]["routes"]
    assert {cidr: routes[cidr] for cidr in HYDRA.routes} == {cidr: ["tag:subnet-router-hydra"] for cidr in HYDRA.routes}
    assert routes["10.245.0.0/16"] == ["tag:subnet-router-cosmos"]
    assert document["autoApprovers"]["exitNode"] == ["tag:exit"]
    # Base rules first, in their order; then one rule per site, sites by name, routes in address order.
    assert document["acls"][0]["dst"] == ["autogroup:member:*", "autogroup:tagged:*"]
    assert document["acls"][-2:] == [
        {
            "action": "accept",
            "src": ["group:admins"],
            "dst": ["10.97.0.0/16:*", "10.245.0.0/16:*", "172.31.250.0/28:*"],
        },
        {
            "action": "accept",
            "src": ["group:admins"],
            "dst": ["10.96.0.0/16:*", "10.244.0.0/16:*", "172.30.250.0/28:*"],
        },
    ]


def test_router_tag_owner_is_a_parameter_and_must_exist() -> None:
    document = render_policy(base(), sites=(HYDRA,), version="0.28", router_tag_owner="group:ops").document
    assert document["tagOwners"]["tag:subnet-router-hydra"] == ["group:ops"]
    assert document["acls"][-1]["src"] == ["group:ops"]
    problems = render_problems(base(), sites=(HYDRA,), router_tag_owner="group:netops")
    assert problems[0].startswith("tagOwners[\"tag:subnet-router-hydra\"][0]: group 'group:netops' is not defined")


def test_render_is_idempotent() -> None:
    for version in VERSIONS:
        rendered = render_policy(BASE_TEXT, sites=SITES, version=version)
        assert render_policy(rendered.text, sites=SITES, version=version) == rendered


def test_allow_all_base_gets_no_acl() -> None:
    """{} allows everything; one generated rule would deny everything else, so none is added."""
    document = render_policy('{"groups": {"group:admins": ["alice@"]}}', sites=(HYDRA,), version="0.28").document
    assert "acls" not in document
    assert document["hosts"] == {"gateway-hydra": "172.30.250.10/32"}
    assert set(document["autoApprovers"]["routes"]) == set(HYDRA.routes)


def test_deny_all_base_gets_the_site_rule_only() -> None:
    document = render_policy(base(acls=[]), sites=(HYDRA,), version="0.29").document
    assert document["acls"] == [
        {"action": "accept", "src": ["group:admins"], "dst": ["10.96.0.0/16:*", "10.244.0.0/16:*", "172.30.250.0/28:*"]}
    ]


def test_grants_are_kept_on_029_and_converted_on_028() -> None:
    text = base(acls=None, grants=[{"src": ["group:ops"], "dst": ["tag:server"], "ip": ["tcp:22"]}])
    on_029 = render_policy(text, sites=(HYDRA,), version="0.29").document
    assert on_029["grants"] == [{"src": ["group:ops"], "dst": ["tag:server"], "ip": ["tcp:22"]}]
    assert [acl["src"] for acl in on_029["acls"]] == [["group:admins"]]
    on_028 = render_policy(text, sites=(HYDRA,), version="0.28.0").document
    assert "grants" not in on_028
    assert on_028["acls"][-1] == {"action": "accept", "proto": "tcp", "src": ["group:ops"], "dst": ["tag:server:22"]}
    parse_policy(json.dumps(on_028), version="0.28")


def test_grants_that_have_no_acl_form_fail_the_028_render() -> None:
    text = base(grants=[{"src": ["group:ops"], "dst": ["tag:server"], "ip": ["*"], "via": ["tag:server"]}])
    assert render_problems(text, version="0.28") == [
        "grants[0].via: via route steering has no ACL equivalent on Headscale 0.28"
    ]


def test_identical_predefined_entries_are_not_conflicts() -> None:
    predefined = base(
        tagOwners={"tag:server": ["group:admins"], "tag:subnet-router-hydra": ["group:admins"]},
        hosts={"gateway-hydra": "172.30.250.10"},
        autoApprovers={"routes": {"10.244.0.0/16": ["tag:subnet-router-hydra"]}},
    )
    assert render_policy(predefined, sites=(HYDRA,), version="0.29") == render_policy(
        base(), sites=(HYDRA,), version="0.29"
    )


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"tagOwners": {"tag:subnet-router-hydra": ["group:ops"]}}, 'tagOwners["tag:subnet-router-hydra"]'),
        ({"hosts": {"gateway-hydra": "172.30.250.11/32"}}, 'hosts["gateway-hydra"]'),
        (
            {"autoApprovers": {"routes": {"10.244.0.0/16": ["tag:server"]}}, "tagOwners": {"tag:server": ["alice@"]}},
            'autoApprovers.routes["10.244.0.0/16"]',
        ),
        ({"hosts": ["gateway-hydra"]}, "hosts"),
        ({"acls": {}}, "acls"),
    ],
)
def test_conflicts_with_the_base_are_refused(extra: dict[str, Any], path: str) -> None:
    problems = render_problems(base(**extra), sites=(HYDRA,))
    assert [problem.split(": ", 1)[0] for problem in problems] == [path]


def test_render_refuses_an_invalid_result_with_paths() -> None:
    problems = render_problems(base(acls=[{"action": "accept", "src": ["group:nope"], "dst": ["tag:server:22"]}]))
    assert problems == ["acls[0].src[0]: group 'group:nope' is not defined in groups"]


@pytest.mark.parametrize(
    ("site", "path", "fragment"),
    [
        (dict(name="Hydra"), 'sites["Hydra"].name', "lower-case DNS label"),
        (dict(gateway_ip="172.30.251.10"), 'sites["hydra"].gateway_ip', "outside every route"),
        (dict(gateway_ip="172.30.250.10/32"), 'sites["hydra"].gateway_ip', "not an IP address"),
        (dict(routes=("0.0.0.0/0",)), 'sites["hydra"].routes[0]', "default route"),
        (dict(routes=("100.64.0.0/16", "172.30.250.0/28")), 'sites["hydra"].routes[0]', "tailnet range"),
        (dict(routes=("10.244.0.1/16", "172.30.250.0/28")), 'sites["hydra"].routes[0]', "host bits set"),
        (dict(routes="172.30.250.0/28"), 'sites["hydra"].routes', "not one string"),
        (dict(routes=()), 'sites["hydra"].routes', "at least one route"),
    ],
)
def test_sites_are_checked(site: dict[str, Any], path: str, fragment: str) -> None:
    fields = {"name": "hydra", "gateway_ip": "172.30.250.10", "routes": ("172.30.250.0/28",), **site}
    with pytest.raises(PolicyError) as caught:
        SiteRoutes(**fields)
    assert any(p.path == path and fragment in p.reason for p in caught.value.problems), caught.value


def test_sites_must_not_share_names_or_routes() -> None:
    twin = SiteRoutes(name="hydra", gateway_ip="172.32.250.10", routes=("172.32.250.0/28",))
    assert render_problems(base(), sites=(HYDRA, twin)) == ['sites["hydra"]: two sites have this name']
    overlapping = SiteRoutes(name="lab", gateway_ip="172.33.250.10", routes=("10.244.128.0/17", "172.33.250.0/28"))
    problems = render_problems(base(), sites=(overlapping, HYDRA))
    assert len(problems) == 1
    assert problems[0].startswith("sites[\"lab\"].routes[0]: 10.244.128.0/17 overlaps 10.244.0.0/16 of site 'hydra'")


def test_version_must_be_supported() -> None:
    with pytest.raises(ValueError, match="unsupported Headscale version"):
        render_policy(base(), sites=SITES, version="0.27")


# --- determinism ------------------------------------------------------------------------------------------------


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same document with every object's keys, and every order-free list, in a random order."""
    if isinstance(value, dict):
        items = [(key, shuffled(item, rng)) for key, item in value.items()]
        rng.shuffle(items)
        return dict(items)
    return value


def shuffle_base(document: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    result = shuffled(document, rng)
    for key in ("groups", "tagOwners"):
        for members in result.get(key, {}).values():
            rng.shuffle(members)
    rng.shuffle(result.get("autoApprovers", {}).get("exitNode", []))
    return result


@st.composite
def site_lists(draw: st.DrawFn) -> list[SiteRoutes]:
    chosen = draw(st.lists(st.sampled_from([("cosmos", 1), ("hydra", 0), ("lab", 2)]), min_size=1, unique=True))
    sites = []
    for name, k in chosen:
        subnets = draw(st.lists(st.integers(0, 255), min_size=1, max_size=4, unique=True))
        routes = [f"10.{10 * k + 1}.{n}.0/24" for n in subnets] + [f"172.{30 + k}.250.0/28"]
        sites.append(SiteRoutes(name=name, gateway_ip=f"172.{30 + k}.250.10", routes=tuple(routes)))
    return sites


BASE_DOCUMENT = render_policy(BASE_TEXT, sites=(), version="0.28").document


@settings(max_examples=30, deadline=None)
@given(sites=site_lists(), data=st.data(), version=st.sampled_from(VERSIONS))
def test_render_is_canonical_under_permutations(sites: list[SiteRoutes], data: st.DataObject, version: str) -> None:
    reference = render_policy(json.dumps(BASE_DOCUMENT), sites=sites, version=version)
    rng = data.draw(st.randoms(use_true_random=False))
    permuted_sites = [
        SiteRoutes(name=s.name, gateway_ip=s.gateway_ip, routes=tuple(data.draw(st.permutations(s.routes))))
        for s in data.draw(st.permutations(sites))
    ]
    base_text = json.dumps(shuffle_base(json.loads(json.dumps(BASE_DOCUMENT)), rng), indent=rng.choice([None, 2]))
    again = render_policy(base_text, sites=permuted_sites, version=version)
    assert isinstance(again, RenderedPolicy)
    assert again.sha256 == reference.sha256
    assert again.text == reference.text


def test_different_inputs_give_different_hashes() -> None:
    """The determinism property above is not vacuous: a real change changes the hash."""
    one = render_policy(BASE_TEXT, sites=(HYDRA,), version="0.29")
    two = render_policy(BASE_TEXT, sites=SITES, version="0.29")
    moved = SiteRoutes(name="hydra", gateway_ip="172.30.250.11", routes=HYDRA.routes)
    three = render_policy(BASE_TEXT, sites=(moved,), version="0.29")
    assert len({one.sha256, two.sha256, three.sha256}) == 3
