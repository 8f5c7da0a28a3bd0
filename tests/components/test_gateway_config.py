"""Gateway renderers: split-DNS hosts file and Corefile, tailnet kubeconfig, tailnet address finder."""

from __future__ import annotations

import base64
import ipaddress
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import Configuration
from kubernetes.config.kube_config import KubeConfigLoader, load_kube_config

from headscale_ha.components.gateway_config import (
    NXDOMAIN_PORT,
    TAILNET_IPV4,
    TAILNET_IPV6,
    render_corefile,
    render_hosts,
    rewrite_kubeconfig,
    tailnet_addresses,
)

ZONE = "hydra.tn.example.internal"

# --------------------------------------------------------------------------------------------- hosts file


def parse_hosts(text: str) -> dict[str, str]:
    """Read a hosts file the way CoreDNS does: '#' starts a comment, then IP followed by names."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            ip, *names = fields
            for name in names:
                entries[name] = ip
    return entries


def test_hosts_are_sorted_by_name_one_line_each() -> None:
    records = {
        f"gateway.{ZONE}": "10.40.0.10",
        f"api.{ZONE}": "10.40.0.10",
        f"nas.{ZONE}": "fd00:0:0::0:7",
    }
    text = render_hosts(records)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == [
        f"10.40.0.10 api.{ZONE}",
        f"10.40.0.10 gateway.{ZONE}",
        f"fd00::7 nas.{ZONE}",
    ]
    assert text.endswith("\n")
    assert parse_hosts(text) == {f"api.{ZONE}": "10.40.0.10", f"gateway.{ZONE}": "10.40.0.10", f"nas.{ZONE}": "fd00::7"}


def test_hosts_do_not_depend_on_insertion_order() -> None:
    records = {f"{name}.{ZONE}": f"10.0.0.{index}" for index, name in enumerate(["c", "a", "b", "aa", "a-b"], 1)}
    assert render_hosts(records) == render_hosts(dict(reversed(records.items())))


def test_empty_hosts_file_is_only_the_header() -> None:
    assert parse_hosts(render_hosts({})) == {}


def test_absolute_spelling_is_the_same_name() -> None:
    text = render_hosts({f"api.{ZONE}.": "10.0.0.1", f"api.{ZONE}": "10.0.0.1"})
    assert parse_hosts(text) == {f"api.{ZONE}": "10.0.0.1"}


def test_one_name_with_two_addresses_is_refused() -> None:
    with pytest.raises(ValueError, match=r"api\.hydra.*10\.0\.0\.1.*10\.0\.0\.2"):
        render_hosts({f"api.{ZONE}": "10.0.0.1", f"api.{ZONE}.": "10.0.0.2"})


@pytest.mark.parametrize(
    ("name", "ip", "message"),
    [
        (f"api.{ZONE}", "10.0.0.256", r"records\['api\.hydra[^']*'\]: '10\.0\.0\.256' is not an IP address"),
        (f"api.{ZONE}", "", "is not an IP address"),
        (f"api.{ZONE}", "10.0.0.0/24", "is not an IP address"),
        (f"api.{ZONE}", "0.0.0.0", "is not a unicast address"),
        (f"api.{ZONE}", "224.0.0.1", "is not a unicast address"),
        (f"API.{ZONE}", "10.0.0.1", r"records\['API\.hydra.*not a lowercase DNS name"),
        (f"my_host.{ZONE}", "10.0.0.1", "not a lowercase DNS name"),
        (f"-api.{ZONE}", "10.0.0.1", "not a lowercase DNS name"),
        (f"api..{ZONE}", "10.0.0.1", "not a lowercase DNS name"),
        (f"*.{ZONE}", "10.0.0.1", "not a lowercase DNS name"),
        (f"{'a' * 64}.{ZONE}", "10.0.0.1", "not a lowercase DNS name"),
        ("", "10.0.0.1", "not a lowercase DNS name"),
        (f"api.{ZONE} evil", "10.0.0.1", "not a lowercase DNS name"),
    ],
)
def test_bad_records_are_refused_by_name(name: str, ip: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_hosts({f"ok.{ZONE}": "10.0.0.9", name: ip})


def test_records_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="must be a mapping"):
        render_hosts([(f"api.{ZONE}", "10.0.0.1")])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- Corefile

#: Every CoreDNS 1.12 plugin this project's Corefile may use, with the options each accepts inside its block.
PLUGIN_OPTIONS: dict[str, set[str]] = {
    "bind": set(),
    "cache": {"success", "denial", "prefetch", "serve_stale"},
    "errors": {"consolidate"},
    "forward": {"except", "force_tcp", "prefer_udp", "expire", "max_fails", "policy", "health_check"},
    "health": {"lameduck"},
    "hosts": {"ttl", "reload", "no_reverse", "fallthrough"},
    "log": {"class"},
    "loop": set(),
    "ready": set(),
    "template": {"match", "answer", "additional", "authority", "rcode", "ederror", "fallthrough"},
}
#: The execution order compiled into CoreDNS (plugin.cfg), restricted to the plugins above: a request passes the
#: plugins of a block in THIS order whatever the Corefile says.
CHAIN_ORDER = ["bind", "ready", "health", "errors", "log", "cache", "template", "hosts", "loop", "forward"]


@dataclass
class Directive:
    name: str
    args: list[str]
    options: list[Directive] = field(default_factory=list)


@dataclass
class ServerBlock:
    keys: list[str]
    directives: list[Directive]

    def get(self, name: str) -> list[Directive]:
        return [directive for directive in self.directives if directive.name == name]

    @property
    def names(self) -> list[str]:
        return [directive.name for directive in self.directives]


def tokenize(text: str) -> list[list[str]]:
    """Split a Corefile into lines of tokens: '#' comments dropped, double-quoted strings kept whole."""
    lines = []
    for raw in text.splitlines():
        tokens = []
        for quoted, bare, _comment in re.findall(r'"((?:[^"\\]|\\.)*)"|([^\s"#]+)|(#.*)', raw):
            if _comment:
                break
            tokens.append(quoted if quoted else bare)
        if tokens:
            lines.append(tokens)
    return lines


def parse_corefile(text: str) -> list[ServerBlock]:
    """A tiny Corefile parser: server blocks of directives, each directive with an optional block of options."""
    blocks: list[ServerBlock] = []
    stack: list[list[Directive]] = []
    for tokens in tokenize(text):
        if tokens == ["}"]:
            assert stack, "unbalanced '}'"
            stack.pop()
            continue
        opens = tokens[-1] == "{"
        words = tokens[:-1] if opens else tokens
        assert not {"{", "}"} & set(words), f"brace inside a line: {tokens}"
        if not stack:
            assert opens, f"a server block must open with '{{': {tokens}"
            blocks.append(ServerBlock(keys=words, directives=[]))
            stack.append(blocks[-1].directives)
            continue
        directive = Directive(name=words[0], args=words[1:])
        stack[-1].append(directive)
        if opens:
            stack.append(directive.options)
    assert not stack, "unclosed block"
    return blocks


def blocks_by_key(text: str) -> dict[str, ServerBlock]:
    blocks = parse_corefile(text)
    keyed = {block.keys[0]: block for block in blocks}
    assert all(len(block.keys) == 1 for block in blocks)
    assert len(keyed) == len(blocks), "two server blocks share a key"
    return keyed


SOA = f"{ZONE}. 30 IN SOA ns.{ZONE}. hostmaster.{ZONE}. 1 7200 1800 86400 30"
SMALL_COREFILE = f"""\
# Rendered by headscale-ha; do not edit.
# Split-DNS zone {ZONE}: names from the hosts file, NXDOMAIN for the rest, never sent upstream.
{ZONE}:1053 {{
    errors
    health :8080 {{
        lameduck 5s
    }}
    ready :8181
    cache 30
    loop
    hosts /etc/coredns-hosts/hosts {ZONE} {{
        ttl 30
        reload 5s
        no_reverse
        fallthrough {ZONE}
    }}
    forward . 127.0.0.1:5301
}}

# Negative answers for {ZONE}, reached only through the forward above (loopback only).
{ZONE}:5301 {{
    bind 127.0.0.1
    errors
    template IN SOA {ZONE} {{
        match ^hydra[.]tn[.]example[.]internal[.]$
        answer "{SOA}"
        fallthrough
    }}
    template ANY ANY {ZONE} {{
        match ^hydra[.]tn[.]example[.]internal[.]$
        authority "{SOA}"
        fallthrough
    }}
    template ANY ANY {ZONE} {{
        rcode NXDOMAIN
        authority "{SOA}"
    }}
}}

# Everything outside the zone goes to the upstream resolvers.
.:1053 {{
    errors
    cache 30
    loop
    forward . 1.1.1.1 [2606:4700:4700::1111]:53
}}
"""


def test_small_corefile_line_by_line() -> None:
    text = render_corefile(
        zone=ZONE,
        hosts_path="/etc/coredns-hosts/hosts",
        upstream=["1.1.1.1", "2606:4700:4700::1111"],
        ttl=30,
        port=1053,
    )
    assert text.splitlines() == SMALL_COREFILE.splitlines()
    assert text == SMALL_COREFILE


def test_defaults_serve_the_zone_on_53_with_no_upstream_block() -> None:
    blocks = blocks_by_key(render_corefile(zone=ZONE))
    assert set(blocks) == {f"{ZONE}:53", f"{ZONE}:{NXDOMAIN_PORT}"}
    (hosts,) = blocks[f"{ZONE}:53"].get("hosts")
    assert hosts.args == ["/etc/coredns/hosts/hosts", ZONE]
    assert {option.name: option.args for option in hosts.options}["ttl"] == ["60"]


@pytest.mark.parametrize("upstream", [(), ("10.0.0.53",), ("1.1.1.1", "9.9.9.9", "2620:fe::fe")])
@pytest.mark.parametrize("log_queries", [False, True])
def test_only_known_plugins_and_options_are_emitted(upstream: tuple[str, ...], log_queries: bool) -> None:
    blocks = parse_corefile(render_corefile(zone=ZONE, upstream=upstream, log_queries=log_queries, port=1053))
    for block in blocks:
        assert set(block.names) <= set(PLUGIN_OPTIONS), block.keys
        for directive in block.directives:
            assert {option.name for option in directive.options} <= PLUGIN_OPTIONS[directive.name], directive
        # CoreDNS refuses every one of these twice in a block, except 'template'.
        once = [name for name in block.names if name != "template"]
        assert len(once) == len(set(once)), block.keys


def test_health_and_ready_are_served_once_on_the_probe_ports() -> None:
    blocks = parse_corefile(render_corefile(zone=ZONE, upstream=["1.1.1.1"]))
    health = [directive for block in blocks for directive in block.get("health")]
    ready = [directive for block in blocks for directive in block.get("ready")]
    assert [directive.args for directive in health] == [[":8080"]]
    assert [directive.args for directive in ready] == [[":8181"]]


def test_unknown_zone_names_never_reach_an_upstream_resolver() -> None:
    text = render_corefile(zone=ZONE, upstream=["1.1.1.1", "8.8.8.8"], port=1053)
    blocks = blocks_by_key(text)
    zone_block = blocks[f"{ZONE}:1053"]
    # In CoreDNS's execution order, what may run after 'hosts' falls through in the zone block:
    after_hosts = sorted(
        (name for name in zone_block.names if CHAIN_ORDER.index(name) > CHAIN_ORDER.index("hosts")),
        key=CHAIN_ORDER.index,
    )
    assert after_hosts == ["loop", "forward"]  # loop only observes; forward is the last word
    (forward,) = zone_block.get("forward")
    assert forward.args == [".", f"127.0.0.1:{NXDOMAIN_PORT}"]
    (hosts,) = zone_block.get("hosts")
    assert [option.args for option in hosts.options if option.name == "fallthrough"] == [[ZONE]]
    # The loopback block answers on its own and only on loopback.
    negative = blocks[f"{ZONE}:{NXDOMAIN_PORT}"]
    assert negative.get("bind")[0].args == ["127.0.0.1"]
    assert "forward" not in negative.names
    assert "hosts" not in negative.names
    # Upstream forwarding exists only in the '.' block, which CoreDNS never selects for names in the zone.
    upstream_blocks = [key for key, block in blocks.items() if any("1.1.1.1" in d.args for d in block.get("forward"))]
    assert upstream_blocks == [".:1053"]


def test_no_template_shares_a_block_with_hosts() -> None:
    # 'template' runs before 'hosts' in CoreDNS: a catch-all NXDOMAIN template next to 'hosts' would answer the
    # names of the hosts file too.
    for block in parse_corefile(render_corefile(zone=ZONE, upstream=["1.1.1.1"])):
        assert not ({"template", "hosts"} <= set(block.names)), block.keys


def _template_outcome(block: ServerBlock, qname: str, qtype: str) -> tuple[str, list[str], list[str]] | None:
    """Evaluate the block's templates as CoreDNS does: (rcode, answer, authority) of the first template that fires."""
    for template in block.get("template"):
        _cls, ttype, *_zones = template.args
        options: dict[str, list[list[str]]] = {}
        for option in template.options:
            options.setdefault(option.name, []).append(option.args)
        if ttype not in ("ANY", qtype):
            continue
        patterns = [arg for args in options.get("match", [[".*"]]) for arg in args]
        if any(re.search(pattern, qname) for pattern in patterns):
            rcode = options.get("rcode", [["NOERROR"]])[0][0]
            return rcode, [a[0] for a in options.get("answer", [])], [a[0] for a in options.get("authority", [])]
        assert "fallthrough" in options, "a template without fallthrough must match everything it sees"
    return None


@pytest.mark.parametrize(
    ("qname", "qtype", "rcode", "answers"),
    [
        (f"{ZONE}.", "SOA", "NOERROR", 1),
        (f"{ZONE}.", "A", "NOERROR", 0),
        (f"{ZONE}.", "NS", "NOERROR", 0),
        (f"nope.{ZONE}.", "A", "NXDOMAIN", 0),
        (f"nope.{ZONE}.", "SOA", "NXDOMAIN", 0),
        (f"a.b.{ZONE}.", "AAAA", "NXDOMAIN", 0),
        # '[.]' in the match is a literal dot: a look-alike apex must not get the apex's answers.
        ("hydraxtn.example.internal.", "SOA", "NXDOMAIN", 0),
    ],
)
def test_negative_block_answers_with_the_zone_soa(qname: str, qtype: str, rcode: str, answers: int) -> None:
    text = render_corefile(zone=ZONE, ttl=45)
    negative = blocks_by_key(text)[f"{ZONE}:{NXDOMAIN_PORT}"]
    outcome = _template_outcome(negative, qname, qtype)
    assert outcome is not None
    got_rcode, answer, authority = outcome
    assert (got_rcode, len(answer)) == (rcode, answers)
    soa = (answer or authority)[0].split()
    assert soa[:4] == [f"{ZONE}.", "45", "IN", "SOA"]
    assert len(soa) == 11
    assert all(part.isdigit() for part in soa[6:])
    assert soa[-1] == "45"  # SOA MINIMUM: how long resolvers cache the NXDOMAIN (RFC 2308)


def test_log_is_a_flag_off_by_default() -> None:
    quiet = parse_corefile(render_corefile(zone=ZONE, upstream=["1.1.1.1"]))
    loud = parse_corefile(render_corefile(zone=ZONE, upstream=["1.1.1.1"], log_queries=True))
    assert all("log" not in block.names for block in quiet)
    assert [block.keys[0] for block in loud if "log" in block.names] == [f"{ZONE}:53", ".:53"]


def test_corefile_is_deterministic_and_keeps_upstream_order() -> None:
    first = render_corefile(zone=ZONE, upstream=["9.9.9.9", "1.1.1.1"])
    assert first == render_corefile(zone=ZONE, upstream=("9.9.9.9", "1.1.1.1"))
    (forward,) = blocks_by_key(first)[".:53"].get("forward")
    assert forward.args == [".", "9.9.9.9", "1.1.1.1"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zone": "Hydra.tn.example.internal"}, "zone: .* is not a lowercase DNS name"),
        ({"zone": f"{ZONE}."}, "zone: .* is not a lowercase DNS name"),
        ({"zone": "hydra tn"}, "zone: "),
        ({"zone": ZONE, "ttl": 0}, "ttl: "),
        ({"zone": ZONE, "ttl": True}, "ttl: "),
        ({"zone": ZONE, "port": 0}, "port: "),
        ({"zone": ZONE, "port": 70000}, "port: "),
        ({"zone": ZONE, "port": 8080}, "port: 8080 is already used by the health endpoint"),
        ({"zone": ZONE, "nxdomain_port": 8181}, "nxdomain_port: 8181 is already used by the ready endpoint"),
        ({"zone": ZONE, "port": 5301}, "nxdomain_port: 5301 is already used by port"),
        ({"zone": ZONE, "upstream": "1.1.1.1"}, "upstream: must be a sequence"),
        ({"zone": ZONE, "upstream": ["1.1.1"]}, r"upstream\[0\]: '1\.1\.1' is not an IP address"),
        ({"zone": ZONE, "upstream": ["1.1.1.1", "dns.google"]}, r"upstream\[1\]: "),
        ({"zone": ZONE, "upstream": ["1.1.1.1", "1.1.1.1"]}, r"upstream\[1\]: .* listed twice"),
        ({"zone": ZONE, "upstream": ["0.0.0.0"]}, r"upstream\[0\]: .* not a unicast address"),
        ({"zone": ZONE, "hosts_path": "hosts"}, "hosts_path: "),
        ({"zone": ZONE, "hosts_path": "/etc/coredns/../hosts"}, "hosts_path: "),
        ({"zone": ZONE, "hosts_path": "/etc/coredns//hosts"}, "hosts_path: "),
        ({"zone": ZONE, "hosts_path": "/etc/{$HOME}/hosts"}, "hosts_path: "),
        ({"zone": ZONE, "hosts_path": "/etc/my hosts"}, "hosts_path: "),
    ],
)
def test_bad_corefile_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_corefile(**kwargs)


# --------------------------------------------------------------------------------------------- kubeconfig

GATEWAY = "10.40.0.10"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfakecertificateauthoritybytes0123456789\n-----END CERTIFICATE-----\n"
CA_DATA = base64.b64encode(CA_PEM).decode()
CLIENT_CERT_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nclientcert\n-----END CERTIFICATE-----\n").decode()
CLIENT_KEY_DATA = base64.b64encode(
    b"-----BEGIN EC PRIVATE KEY-----\nS3CR3TK3Y\n-----END EC PRIVATE KEY-----\n"
).decode()
TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.sig-do-not-leak"
PASSWORD = "hunter2-do-not-leak"
SECRETS = (CA_DATA, CLIENT_CERT_DATA, CLIENT_KEY_DATA, TOKEN, PASSWORD)


def admin_kubeconfig() -> dict[str, Any]:
    """What Talos/kubeadm hands out: a CA, a client certificate user, plus a second cluster with a token user."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hydra",
                "cluster": {"server": "https://api.hydra.example.internal:6443", "certificate-authority-data": CA_DATA},
            },
            {
                "name": "hydra-vip",
                "cluster": {"certificate-authority-data": CA_DATA, "server": "https://10.0.0.5:6443/"},
            },
        ],
        "users": [
            {
                "name": "admin@hydra",
                "user": {"client-certificate-data": CLIENT_CERT_DATA, "client-key-data": CLIENT_KEY_DATA},
            },
            {"name": "ops", "user": {"token": TOKEN}},
            {"name": "basic", "user": {"username": "ops", "password": PASSWORD}},
        ],
        "contexts": [
            {"name": "admin@hydra", "context": {"cluster": "hydra", "user": "admin@hydra", "namespace": "default"}},
            {"name": "ops@hydra-vip", "context": {"cluster": "hydra-vip", "user": "ops"}},
        ],
        "current-context": "admin@hydra",
        "preferences": {},
    }


def load_with_client(text: str, tmp_path: Path, context: str | None = None) -> Configuration:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    configuration = Configuration()
    load_kube_config(
        config_file=str(path), context=context, client_configuration=configuration, temp_file_path=str(tmp_path)
    )
    return configuration


def test_kubernetes_client_reaches_the_gateway_and_verifies_the_original_name(tmp_path: Path) -> None:
    text = rewrite_kubeconfig(yaml.safe_dump(admin_kubeconfig()), gateway_ip=GATEWAY)
    admin = load_with_client(text, tmp_path)
    assert admin.host == f"https://{GATEWAY}:6443"
    assert admin.tls_server_name == "api.hydra.example.internal"
    assert Path(admin.ssl_ca_cert).read_bytes() == CA_PEM
    assert Path(admin.key_file).read_bytes() == base64.b64decode(CLIENT_KEY_DATA)
    ops = load_with_client(text, tmp_path, context="ops@hydra-vip")
    assert ops.host == f"https://{GATEWAY}:6443"
    assert ops.tls_server_name == "10.0.0.5"
    assert ops.api_key["BearerToken"] == f"Bearer {TOKEN}"


def test_only_server_and_tls_server_name_change() -> None:
    original = admin_kubeconfig()
    rewritten = yaml.safe_load(rewrite_kubeconfig(yaml.safe_dump(original), gateway_ip=GATEWAY, port=16443))
    assert [cluster["cluster"] for cluster in rewritten["clusters"]] == [
        {
            "server": f"https://{GATEWAY}:16443",
            "tls-server-name": "api.hydra.example.internal",
            "certificate-authority-data": CA_DATA,
        },
        {"certificate-authority-data": CA_DATA, "server": f"https://{GATEWAY}:16443", "tls-server-name": "10.0.0.5"},
    ]
    for key in ("users", "contexts", "current-context", "preferences", "apiVersion", "kind"):
        assert rewritten[key] == original[key]
    assert [cluster["name"] for cluster in rewritten["clusters"]] == ["hydra", "hydra-vip"]


def test_output_is_deterministic_and_keeps_key_order() -> None:
    source = yaml.safe_dump(admin_kubeconfig(), sort_keys=False)
    text = rewrite_kubeconfig(source, gateway_ip=GATEWAY)
    assert text == rewrite_kubeconfig(source, gateway_ip=GATEWAY)
    assert list(yaml.safe_load(text)) == list(admin_kubeconfig())
    assert tailnet_addresses(text) == []


def test_existing_tls_server_name_and_path_are_kept() -> None:
    config = admin_kubeconfig()
    config["clusters"] = [
        {
            "name": "behind-lb",
            "cluster": {
                "server": "https://192.0.2.10:443/k8s/clusters/c-1",
                "tls-server-name": "kubernetes.default.svc",
                "certificate-authority-data": CA_DATA,
            },
        }
    ]
    rewritten = yaml.safe_load(rewrite_kubeconfig(yaml.safe_dump(config), gateway_ip=GATEWAY))
    assert rewritten["clusters"][0]["cluster"] == {
        "server": f"https://{GATEWAY}:6443/k8s/clusters/c-1",
        "tls-server-name": "kubernetes.default.svc",
        "certificate-authority-data": CA_DATA,
    }


def test_ipv6_hosts_and_gateways_are_bracketed(tmp_path: Path) -> None:
    config = admin_kubeconfig()
    config["clusters"][0]["cluster"]["server"] = "https://[fd00:10::5]:6443"
    text = rewrite_kubeconfig(yaml.safe_dump(config), gateway_ip="fd00:40::10")
    loaded = load_with_client(text, tmp_path)
    assert loaded.host == "https://[fd00:40::10]:6443"
    assert loaded.tls_server_name == "fd00:10::5"


_DELETE = object()


def _with(path: tuple[Any, ...], value: Any) -> str:
    config = admin_kubeconfig()
    target: Any = config
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return yaml.safe_dump(config)


def _fragments(value: str, size: int = 8) -> set[str]:
    """Every ``size``-character piece of a value: a message must not quote even part of a secret."""
    return {value[start : start + size] for start in range(max(1, len(value) - size + 1))}


SERVER = ("clusters", 0, "cluster", "server")


@pytest.mark.parametrize(
    ("text", "field", "injected"),
    [
        (_with(("apiVersion",), "v2beta"), "apiVersion", "v2beta"),
        (_with(("kind",), _DELETE), "kind", None),
        (_with(("clusters",), []), "clusters", None),
        (_with(("clusters",), {"hydra": {}}), "clusters", None),
        (_with(("clusters", 1), "hydra-string"), "clusters[1]", "hydra-string"),
        (_with(("clusters", 1, "name"), ""), "clusters[1].name", None),
        (_with(("clusters", 0, "cluster"), None), "clusters[0].cluster", None),
        (_with(SERVER, _DELETE), "clusters[0].cluster.server", None),
        (_with(SERVER, "http://plain.example:6443"), "clusters[0].cluster.server", "plain.example"),
        (_with(SERVER, f"https://ops:{PASSWORD}@api:6443"), "clusters[0].cluster.server", PASSWORD),
        (_with(SERVER, f"https://api:6443/?token={TOKEN}"), "clusters[0].cluster.server", TOKEN),
        (_with(SERVER, "https://api.example:64z3"), "clusters[0].cluster.server", "64z3"),
        (_with(SERVER, "https://:6443"), "clusters[0].cluster.server", None),
        (_with(SERVER, "ftp://files.example"), "clusters[0].cluster.server", "files.example"),
        (_with(SERVER, 6443), "clusters[0].cluster.server", None),
        (_with(("clusters", 0, "cluster", "tls-server-name"), ""), "clusters[0].cluster.tls-server-name", None),
        (yaml.safe_dump([admin_kubeconfig()]), "kubeconfig: the document must be a mapping", None),
        (f"users:\n- name: ops\n  user: {{token: {TOKEN}\n", "kubeconfig: not valid YAML", None),
        (f"token: {TOKEN}\n\tclient-key-data: {CLIENT_KEY_DATA}: [", "kubeconfig: not valid YAML", None),
        (f"!!python/object:os.system {TOKEN}", "kubeconfig: not valid YAML", None),
    ],
)
def test_bad_kubeconfigs_name_the_field_and_never_a_value(text: str, field: str, injected: str | None) -> None:
    with pytest.raises(ValueError, match=re.escape(field)) as caught:
        rewrite_kubeconfig(text, gateway_ip=GATEWAY)
    # The whole traceback, chained exceptions included, is what a failed `pulumi up` would print.
    shown = "".join(traceback.format_exception(caught.value))
    for secret in SECRETS:
        leaked = sorted(fragment for fragment in _fragments(secret) if fragment in shown)
        assert not leaked, f"part of a secret is in the error: {leaked}"
    assert "api.hydra.example.internal" not in shown
    if injected is not None:
        assert injected not in shown


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gateway_ip": "10.40.0"}, "gateway_ip: "),
        ({"gateway_ip": "api.example"}, "gateway_ip: "),
        ({"gateway_ip": "0.0.0.0"}, "gateway_ip: "),
        ({"gateway_ip": "100.64.0.7"}, "gateway_ip: 100.64.0.7 is a tailnet node address"),
        ({"gateway_ip": "fd7a:115c:a1e0::7"}, "gateway_ip: .* is a tailnet node address"),
        ({"gateway_ip": GATEWAY, "port": 0}, "port: "),
        ({"gateway_ip": GATEWAY, "port": "6443"}, "port: "),
    ],
)
def test_bad_gateway_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rewrite_kubeconfig(yaml.safe_dump(admin_kubeconfig()), **kwargs)


def test_non_text_kubeconfig_is_refused() -> None:
    with pytest.raises(ValueError, match="kubeconfig: must be YAML text"):
        rewrite_kubeconfig(admin_kubeconfig(), gateway_ip=GATEWAY)  # type: ignore[arg-type]


_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_dns_host = st.lists(_label, min_size=1, max_size=4).map(".".join)
_ipv4_host = st.ip_addresses(v=4).map(str)
_gateways = st.ip_addresses(v=4).filter(lambda ip: not (ip.is_unspecified or ip.is_multicast or ip in TAILNET_IPV4))


@settings(max_examples=60, deadline=None)
@given(
    gateway=_gateways,
    host=st.one_of(_dns_host, _ipv4_host),
    original_port=st.one_of(st.none(), st.integers(1, 65535)),
    port=st.integers(1, 65535),
)
def test_any_ipv4_gateway_and_host_round_trip(
    gateway: ipaddress.IPv4Address, host: str, original_port: int | None, port: int
) -> None:
    server = f"https://{host}" + ("" if original_port is None else f":{original_port}")
    config = admin_kubeconfig()
    config["clusters"] = config["clusters"][:1]
    config["clusters"][0]["cluster"]["server"] = server
    rewritten = yaml.safe_load(rewrite_kubeconfig(yaml.safe_dump(config), gateway_ip=str(gateway), port=port))
    cluster = rewritten["clusters"][0]["cluster"]
    assert cluster == {
        "server": f"https://{gateway}:{port}",
        "tls-server-name": host,
        "certificate-authority-data": CA_DATA,
    }
    configuration = Configuration()
    KubeConfigLoader(config_dict=rewritten).load_and_set(configuration)
    assert (configuration.host, configuration.tls_server_name) == (f"https://{gateway}:{port}", host)


# --------------------------------------------------------------------------------------------- tailnet addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server: https://100.64.0.7:6443", ["100.64.0.7"]),
        ("nameserver 100.100.100.100", []),  # MagicDNS, never a node
        ("nameserver fd7a:115c:a1e0::53", []),
        ("routes: [100.64.0.0/10, fd7a:115c:a1e0::/48]", []),  # ranges, not nodes
        ("addresses: 100.64.0.7/32 fd7a:115c:a1e0::7/128", ["100.64.0.7", "fd7a:115c:a1e0::7"]),
        ("inet 100.64.3.4/10 scope global tailscale0", ["100.64.3.4"]),  # interface notation names a node
        ("server: https://[fd7a:115c:a1e0::1a]:6443", ["fd7a:115c:a1e0::1a"]),
        ("host:fd7a:115c:a1e0::2 and FD7A:115C:A1E0:0:0:0:0:2", ["fd7a:115c:a1e0::2"]),
        ("edge 100.127.255.254 and 100.128.0.1 and 100.63.255.255", ["100.127.255.254"]),
        ("10.100.64.0.1 1.100.64.1.5 100.64.0.999", []),  # not dotted quads
        ("a 100.64.0.9. b 100.64.0.8, c 100.64.0.9", ["100.64.0.9", "100.64.0.8"]),
        ("fd7a:115c:a1e1::1 fd00::1 ::ffff:10.0.0.1 2001:db8::100:64", []),
        ("dial ::ffff:100.64.0.3", ["100.64.0.3"]),
        ("time 12:30:45 mac aa:bb:cc:dd:ee:ff sha256:abcdef", []),
        ("", []),
    ],
)
def test_tailnet_addresses_finds_node_addresses(text: str, expected: list[str]) -> None:
    assert tailnet_addresses(text) == expected


def test_tailnet_addresses_scans_rendered_documents() -> None:
    kubeconfig = admin_kubeconfig()
    kubeconfig["clusters"][0]["cluster"]["server"] = "https://100.80.1.2:6443"
    document = "\n---\n".join(
        [yaml.safe_dump(kubeconfig), render_hosts({f"api.{ZONE}": "100.64.0.12", f"gw.{ZONE}": GATEWAY})]
    )
    assert tailnet_addresses(document) == ["100.80.1.2", "100.64.0.12"]


def test_tailnet_ranges_are_tailscales() -> None:
    assert (str(TAILNET_IPV4), str(TAILNET_IPV6)) == ("100.64.0.0/10", "fd7a:115c:a1e0::/48")
