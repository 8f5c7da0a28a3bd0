"""A client pinned to an address: the TCP connection goes to the address, TLS and `Host` name the URL's host.

The providers pin the active site's `publicAddress` (provider/base.py), so a promotion reaches the
new active's Headscale before the public DNS record moves to it, with the certificate checked as usual.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import requests
import requests.adapters


class PinnedAddressAdapter(requests.adapters.HTTPAdapter):
    """HTTPS to an address in the URL, spoken as `hostname`: the URL only says where the TCP connection goes,
    while SNI and the certificate's name check use `hostname` (urllib3's `server_hostname`/`assert_hostname`), so
    a pinned connection is verified exactly as one that resolved `hostname` would be (CA checks unchanged)."""

    def __init__(self, hostname: str) -> None:
        self._tls_name = {"server_hostname": hostname, "assert_hostname": hostname}
        super().__init__()  # builds the pool manager, through init_poolmanager below

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = requests.adapters.DEFAULT_POOLBLOCK, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **{**pool_kwargs, **self._tls_name})

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """Through a proxy (`HTTPS_PROXY`) the tunnel goes to the address, and TLS inside it still names `hostname`."""
        return super().proxy_manager_for(proxy, **{**proxy_kwargs, **self._tls_name})


def pinned_origin(base_url: str, connect_to: str) -> str:
    """`https://<address>[:<port>]`, where a client pinned to `connect_to` sends its requests; without a port in
    `connect_to` the URL's own port is used (443 for `https://`). Only `https://` URLs can be pinned: the
    certificate's name is what makes the address trustworthy."""
    base = urllib.parse.urlsplit(base_url)
    if base.scheme != "https" or not base.hostname:
        raise ValueError(f"connect_to needs an https:// base_url, got {base_url!r}")
    host, port = _split_address(connect_to)
    port = port or base.port
    return f"https://{host}:{port}" if port else f"https://{host}"


def _split_address(connect_to: str) -> tuple[str, int | None]:
    """`203.0.113.20`, `127.0.0.5:8443`, `[2001:db8::1]:443` → the host (IPv6 in brackets) and the port, if given."""
    refusal = ValueError(f"connect_to must be an address, optionally with :port (IPv6 in brackets), got {connect_to!r}")
    target = urllib.parse.urlsplit(f"//{connect_to}")
    try:
        port = target.port
    except ValueError:  # not a port, or an IPv6 address without brackets
        raise refusal from None
    if not target.hostname or target.netloc != connect_to or target.username is not None:
        raise refusal
    return (f"[{target.hostname}]" if ":" in target.hostname else target.hostname), port


def pin(session: requests.Session, base_url: str, connect_to: str) -> tuple[str, str]:
    """Mount the pinned adapter on ``session`` for the origin of ``connect_to``; the URL to send ``base_url``'s
    requests to, and the ``Host`` header they carry."""
    base = urllib.parse.urlsplit(base_url)
    origin = pinned_origin(base_url, connect_to)
    session.mount(f"{origin}/", PinnedAddressAdapter(str(base.hostname)))
    return f"{origin}{base.path}", base.netloc
