"""The provider talks to the active site's own Headscale: without `headscaleApiUrl` it connects to the public URL
at the active site's `publicAddress`, so a promotion's `up` reaches the new active before the public DNS record
moves. TLS (SNI, the certificate's name, the CA) and the `Host` header still name the public hostname; a real TLS
server on a loopback address, with a certificate of a private CA, shows it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pulumi.dynamic import Config, ConfigureRequest

from headscale_ha.provider.base import StackSettings, shared_client
from headscale_ha.provider.client import HeadscaleClient, UnreachableError
from headscale_ha.provider.pinning import pinned_origin
from headscale_ha.provider.resources import UserProvider

HOSTNAME = "headscale.example.com"
PUBLIC_URL = f"https://{HOSTNAME}"
#: A loopback address of its own (Linux routes all of 127.0.0.0/8 to lo): nothing else listens there.
LOOPBACK = "127.0.0.23"
SECRET = "s3cr3tpart0123456789abcdefghijklmn"
API_KEY = f"hskey-api-abcdefghijkl-{SECRET}"
ANSWERS = {"/version": {"version": "v0.29.2"}, "/api/v1/user": {"users": []}}


# ------------------------------------------------------------------------------------------------ stack settings


def _tailnet(active: str = "cosmos", **cosmos: Any) -> dict[str, Any]:
    sites = [
        {"name": "hydra", "publicAddress": "198.51.100.10"},
        {"name": "cosmos", "publicAddress": "203.0.113.20", **cosmos},
    ]
    return {"publicHostname": HOSTNAME, "activeSite": active, "sites": sites}


def _settings(tailnet: dict[str, Any] | str, **extra: str) -> StackSettings:
    text = tailnet if isinstance(tailnet, str) else json.dumps(tailnet)
    return StackSettings.from_config(Config({"headscale-ha:tailnet": text, **extra}, "headscale-ha"))


def test_the_default_url_is_reached_at_the_active_sites_address() -> None:
    """Both sites have an address; the one `activeSite` names wins, whichever way the engine sends the value."""
    settings = _settings(_tailnet("cosmos"))
    assert (settings.api_url, settings.api_address) == (PUBLIC_URL, "203.0.113.20")
    assert _settings(_tailnet("hydra")).api_address == "198.51.100.10"
    mapping = StackSettings.from_config({"headscale-ha:tailnet": _tailnet("hydra")})
    assert mapping.api_address == "198.51.100.10", "a structured value is read as the JSON text is"


@pytest.mark.parametrize(
    ("tailnet", "extra"),
    [
        (_tailnet(), {"headscale-ha:headscaleApiUrl": "http://127.0.0.1:8080"}),
        (_tailnet(publicAddress=None), {}),
        ({k: v for k, v in _tailnet().items() if k != "sites"}, {}),
        (_tailnet(active="andromeda"), {}),
        (_tailnet(publicAddress="not-an-address"), {}),
        ("{not json", {}),
    ],
    ids=["explicit-url", "no-public-address", "no-sites", "unknown-active-site", "not-an-address", "not-json"],
)
def test_no_address_leaves_the_url_as_it_is(tailnet: dict[str, Any] | str, extra: dict[str, str]) -> None:
    settings = _settings(tailnet, **extra)
    assert settings.api_address is None
    assert settings.api_url == extra.get(
        "headscale-ha:headscaleApiUrl", None if isinstance(tailnet, str) else PUBLIC_URL
    )


def test_configure_pins_the_shared_client_to_the_active_site() -> None:
    config = {"headscale-ha:tailnet": json.dumps(_tailnet()), "headscale-ha:bootstrapApiKey": API_KEY}
    provider = UserProvider()
    provider.configure(ConfigureRequest(Config(config, "headscale-ha")))
    assert (provider.client.base_url, provider.client.connect_to) == (PUBLIC_URL, "203.0.113.20")
    assert provider.client.where == f"{PUBLIC_URL} (at 203.0.113.20)"
    assert SECRET not in repr(provider.client)
    explicit = UserProvider()
    explicit.configure(ConfigureRequest(Config({**config, "headscale-ha:headscaleApiUrl": PUBLIC_URL}, "p")))
    assert explicit.client.connect_to is None, "headscaleApiUrl is used as it is, through DNS"
    assert explicit.client is not provider.client, "the address is part of the shared client's key"
    assert shared_client(PUBLIC_URL, API_KEY, version=None, connect_to="203.0.113.20") is provider.client


@pytest.mark.parametrize(
    ("base", "connect_to", "origin"),
    [
        (PUBLIC_URL, "203.0.113.20", "https://203.0.113.20"),
        (PUBLIC_URL, "127.0.0.23:8443", "https://127.0.0.23:8443"),
        (f"{PUBLIC_URL}:8443", "203.0.113.20", "https://203.0.113.20:8443"),
        (PUBLIC_URL, "[2001:db8::1]", "https://[2001:db8::1]"),
    ],
)
def test_the_pinned_origin_keeps_the_urls_port_unless_told(base: str, connect_to: str, origin: str) -> None:
    assert pinned_origin(base, connect_to) == origin


@pytest.mark.parametrize(
    ("base", "connect_to"),
    [("http://127.0.0.1:8080", "203.0.113.20"), (PUBLIC_URL, "2001:db8::1"), (PUBLIC_URL, "1.2.3.4/x")],
)
def test_only_an_https_url_is_pinned_and_only_to_an_address(base: str, connect_to: str) -> None:
    with pytest.raises(ValueError, match="connect_to"):
        HeadscaleClient(base, API_KEY, connect_to=connect_to)


# ------------------------------------------------------------------------------------------------ a real TLS server


@dataclass(frozen=True)
class Pki:
    """A private CA and server certificates it signed, by the name they are for."""

    ca: Path
    certs: dict[str, tuple[Path, Path]]


NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def _leaf(directory: Path, name: str, serial: int) -> tuple[Path, Path]:
    """A server certificate for `name` (its only subjectAltName), signed by the CA in `directory`."""
    (directory / f"{name}.ext").write_text(
        f"subjectAltName=DNS:{name}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    )
    _openssl(directory, "req", *NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    signed_by_ca = ("-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", str(serial), "-days", "2")
    _openssl(
        directory, "x509", "-req", "-in", f"{name}.csr", *signed_by_ca, "-extfile", f"{name}.ext", "-out", f"{name}.pem"
    )
    return directory / f"{name}.pem", directory / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA made for this module (the openssl CLI: no other crypto package is installed) and its certificates."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI for the test PKI")
    directory = tmp_path_factory.mktemp("pki")
    ca = ("-subj", "/CN=test CA", "-addext", "basicConstraints=critical,CA:TRUE")
    ca += ("-addext", "keyUsage=critical,keyCertSign,cRLSign", "-days", "2")
    _openssl(directory, "req", "-x509", *NEW_KEY, "-keyout", "ca.key", "-out", "ca.pem", *ca)
    names = (HOSTNAME, "other.example.com")
    return Pki(directory / "ca.pem", {name: _leaf(directory, name, serial) for serial, name in enumerate(names, 2)})


@dataclass
class Seen:
    """What the server saw of each connection and request: the TLS SNI, the Host header, the path, the key."""

    sni: list[str | None] = field(default_factory=list)
    hosts: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    authorized: list[bool] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    """Answers `/version` and `/api/v1/user` as Headscale 0.29 does; anything else is 404."""

    seen: Seen

    def do_GET(self) -> None:
        self.seen.hosts.append(self.headers.get("Host"))
        self.seen.paths.append(self.path)
        self.seen.authorized.append(self.headers.get("Authorization") == f"Bearer {API_KEY}")
        answer = ANSWERS.get(self.path)
        body = json.dumps(answer if answer is not None else {"message": "not found"}).encode()
        self.send_response(200 if answer is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows what the assertions say."""


@dataclass
class TlsServer:
    """A running HTTPS server at `address` (`host:port`) and what it saw."""

    address: str
    seen: Seen


@contextlib.contextmanager
def serving(pki: Pki, name: str, *, host: str = LOOPBACK, port: int = 0) -> Iterator[TlsServer]:
    """Serve with the certificate for `name` at `host:port` (0: any free port), in a thread, until the block ends."""
    seen = Seen()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*pki.certs[name])
    context.sni_callback = lambda _socket, server_name, _context: seen.sni.append(server_name)
    handler = type("Handler", (_Handler,), {"seen": seen})
    server = ThreadingHTTPServer((host, port), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield TlsServer(f"{host}:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def unresolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public hostname does not resolve (as before any DNS record exists, or offline): a client that asks DNS
    for it fails."""
    resolve = socket.getaddrinfo

    def refuse(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.rstrip(".").lower() == HOSTNAME:
            raise socket.gaierror(socket.EAI_NONAME, f"{HOSTNAME} does not resolve in this test")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def trusts(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """The private CA is trusted the way requests is told outside code: REQUESTS_CA_BUNDLE."""
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca))


def _client(connect_to: str | None = None) -> HeadscaleClient:
    return HeadscaleClient(
        PUBLIC_URL, API_KEY, version="0.29", connect_to=connect_to, retries=0, timeout=5, connect_timeout=3
    )


def test_without_the_address_the_name_does_not_resolve(unresolvable: None) -> None:
    """The guard the other tests rely on: a client that is not pinned asks DNS and fails."""
    with pytest.raises(UnreachableError, match=rf"^Headscale Version failed: {PUBLIC_URL} is unreachable: its name"):
        _client().list_users()


def test_the_client_reaches_the_pinned_address_as_the_public_hostname(
    pki: Pki, unresolvable: None, trusts: None
) -> None:
    with serving(pki, HOSTNAME) as server:
        client = _client(server.address)
        assert client.server_version == "v0.29.2"
        assert client.list_users() == []
    assert server.seen.paths == ["/version", "/api/v1/user"]
    assert set(server.seen.sni) == {HOSTNAME}, "TLS names the public hostname, not the address"
    assert server.seen.hosts == [HOSTNAME, HOSTNAME], "so does the Host header"
    assert server.seen.authorized == [False, True], "the version probe is unauthenticated, the API call is not"


def test_a_certificate_for_another_name_is_refused(pki: Pki, unresolvable: None, trusts: None) -> None:
    """The same CA signed it, so only the hostname check can refuse it: that check is on."""
    with serving(pki, "other.example.com") as server, pytest.raises(UnreachableError) as caught:
        _client(server.address).list_users()
    assert str(caught.value) == (
        f"Headscale Version failed: {PUBLIC_URL} (at {server.address}) is unreachable: "
        "the TLS handshake failed (SSLError)"
    )
    assert server.seen.sni == [HOSTNAME], "the handshake was reached, with the public hostname"
    assert server.seen.paths == [], "nothing was sent, least of all the key"


def test_a_certificate_of_an_untrusted_ca_is_refused(
    pki: Pki, unresolvable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the private CA in REQUESTS_CA_BUNDLE the system's CAs decide, and none of them signed it."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    refused = pytest.raises(UnreachableError, match=r"the TLS handshake failed \(SSLError\)")
    with serving(pki, HOSTNAME) as server, refused:
        _client(server.address).list_users()
    assert server.seen.paths == []


def test_messages_name_the_url_and_the_address_never_the_key(unresolvable: None, trusts: None) -> None:
    with socket.socket() as closed:
        closed.bind((LOOPBACK, 0))
        address = f"{LOOPBACK}:{closed.getsockname()[1]}"  # bound, not listening: refused
        with pytest.raises(UnreachableError) as caught:
            _client(address).list_users()
    assert f"{PUBLIC_URL} (at {address}) is unreachable: connection refused" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_provider_connects_to_port_443_of_the_active_sites_address(
    pki: Pki, unresolvable: None, trusts: None
) -> None:
    """End to end, as configured by the stack: publicAddress is a bare address, so this needs port 443."""
    tailnet = _tailnet(active="cosmos", publicAddress=LOOPBACK)
    config = {"headscale-ha:tailnet": json.dumps(tailnet), "headscale-ha:bootstrapApiKey": API_KEY}
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(serving(pki, HOSTNAME, port=443))
        except OSError as exc:  # not root, or something listens there already
            pytest.skip(f"cannot listen on {LOOPBACK}:443: {exc}")
        provider = UserProvider()
        provider.configure(ConfigureRequest(Config(config, "headscale-ha")))
        assert provider.client.where == f"{PUBLIC_URL} (at {LOOPBACK})"
        assert provider.client.list_users() == []
    assert server.seen.paths == ["/version", "/api/v1/user"]
    assert (set(server.seen.sni), set(server.seen.hosts)) == ({HOSTNAME}, {HOSTNAME})
