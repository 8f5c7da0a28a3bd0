"""The machinery every Headscale dynamic provider shares: the stack settings read at `configure`, one client per
server, durations, and how `diff`/`read` survive a server that cannot answer while writes fail naming it."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import math
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pulumi.dynamic import (
    ConfigureRequest,
    DiffResult,
    ReadResult,
    ResourceProvider,
)

from headscale_ha.provider.client import (
    WRITE_PATIENCE_SECONDS,
    HeadscaleClient,
    TransientError,
    VersionMismatchError,
    minor,
)

API_KEY_CONFIG = "headscale-ha:bootstrapApiKey"
API_URL_CONFIG = "headscale-ha:headscaleApiUrl"
#: `version` is the pinned release (program/config.py, components/settings/applications.py `HeadscaleSettings`).
HEADSCALE_CONFIG = "headscale-ha:headscale"
#: `publicHostname` (the default API URL, as program/args.py `api_url` derives it), `users` (with `forceDelete`),
#: and `activeSite` with `sites[].publicAddress` (where the default URL is reached: the active site's own ingress).
TAILNET_CONFIG = "headscale-ha:tailnet"
#: `active` or `standby`: only the active stack manages the tailnet's users (program/args.py `manages_tailnet`).
ROLE_CONFIG = "headscale-ha:role"
#: Failures a `diff` or `read` survives (reporting no change): no answer, or a server mid-upgrade.
SURVIVABLE = (TransientError, VersionMismatchError)
#: A run (one provider process) reads each listing once; writes through the shared client empty them.
LIST_CACHE_SECONDS = math.inf
RECREATE_POLICIES = ("always", "never", "reusableOnly")
#: Seconds a run's first write waits for a Headscale that does not serve yet (the environment of `pulumi`, which
#: the provider's process inherits); unset: `WRITE_PATIENCE_SECONDS`; 0: no wait.
WRITE_PATIENCE_ENV = "HEADSCALE_HA_WRITE_PATIENCE"
MAX_WRITE_PATIENCE = 3600.0
_DURATION = re.compile(r"(\d+)(h|m|s|d)")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class ProviderError(Exception):
    """A refusal or failure of a resource operation, phrased for the person running `pulumi up`."""


def duration(text: str, *, field: str) -> timedelta:
    """`168h`, `90d`, `1h30m` → timedelta; errors name the field."""
    parts = _DURATION.findall(text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ProviderError(f"{field}: expected a duration such as 168h, 90d or 1h30m, got {text!r}")
    return timedelta(seconds=sum(int(n) * _DURATION_UNITS[u] for n, u in parts))


def settle(check: Callable[[], None], error: TransientError, *, seconds: float, rounds: int = 3) -> None:
    """Run `check` now and, after a timeout (the server may still apply the request late), again over `seconds`."""
    rounds = rounds if error.timed_out else 1
    for index in range(rounds):
        check()
        if index < rounds - 1:
            time.sleep(seconds / (rounds - 1))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_CLIENTS: dict[tuple[str, str | None, str, str | None], HeadscaleClient] = {}
_CLIENTS_LOCK = threading.Lock()


def write_patience(environ: Mapping[str, str] = os.environ) -> float:
    """`HEADSCALE_HA_WRITE_PATIENCE` as seconds (see `HeadscaleClient.write_patience`), refused unless 0 to 3600."""
    text = environ.get(WRITE_PATIENCE_ENV, "").strip()
    if not text:
        return WRITE_PATIENCE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WRITE_PATIENCE:
        raise ProviderError(f"{WRITE_PATIENCE_ENV}: expected seconds from 0 to {MAX_WRITE_PATIENCE:g}, got {text!r}")
    return seconds


def shared_client(url: str, api_key: str, *, version: str | None, connect_to: str | None = None) -> HeadscaleClient:
    """The process-wide client for a server (URL and the address it is reached at), key and minor pin (created once,
    thread-safe): one version probe, one remembered failure, one fetch per listing for every provider of the process
    that talks to that server."""
    version = minor(version) if version else None
    key = (url.rstrip("/"), connect_to or None, sha256(api_key), version)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = HeadscaleClient(
                url,
                api_key,
                version=version,
                cache_seconds=LIST_CACHE_SECONDS,
                connect_to=connect_to or None,
                write_patience=write_patience(),
            )
            _CLIENTS[key] = client
        return client


def forget_shared_clients() -> None:
    """Drop the process-wide clients (tests; a new run in the same process)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _utc_now() -> datetime:
    return datetime.now(UTC)


def warn(message: str) -> None:
    """One line on stderr (the host's only channel the engine shows); callers never pass key material."""
    print(f"headscale-ha provider: {' '.join(message.split())}", file=sys.stderr, flush=True)


def _config_object(config: Any, key: str) -> dict[str, Any]:
    """A structured config value: the engine sends JSON text; a mapping is taken as it is."""
    value = config.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


def _active_site_address(tailnet: Mapping[str, Any]) -> str | None:
    """`publicAddress` of the site `activeSite` names: its ingress, which serves the public hostname whatever the
    public DNS record says (during a promotion that record still names the old active until its last step)."""
    active, sites = tailnet.get("activeSite"), tailnet.get("sites")
    if not isinstance(active, str) or not isinstance(sites, list):
        return None
    site = next((s for s in sites if isinstance(s, Mapping) and s.get("name") == active), {})
    try:
        address = ipaddress.ip_address(str(site.get("publicAddress") or ""))
    except ValueError:  # none, or not an address (the program refuses that config before the provider runs)
        return None
    return f"[{address}]" if address.version == 6 else str(address)


@dataclass(frozen=True)
class StackSettings:
    """What the provider reads from the stack config at `configure`; None/empty: the config does not say.

    `api_address`: where the default API URL (no `headscaleApiUrl`) is connected to, the active site's
    `publicAddress`; TLS and `Host` still name the public hostname. None: resolve the URL's name as usual."""

    api_url: str | None = None
    version: str | None = None
    role: str | None = None
    users: dict[str, dict[str, Any]] | None = None
    api_address: str | None = None

    @classmethod
    def from_config(cls, config: Any) -> StackSettings:
        tailnet = _config_object(config, TAILNET_CONFIG)
        hostname = tailnet.get("publicHostname")
        public = f"https://{hostname}" if isinstance(hostname, str) and hostname else None
        explicit = config.get(API_URL_CONFIG)
        url = explicit or public
        address = _active_site_address(tailnet) if public and not explicit else None
        version = _config_object(config, HEADSCALE_CONFIG).get("version")
        role = config.get(ROLE_CONFIG)
        users = tailnet.get("users")
        listed = None
        if isinstance(users, list):
            listed = {u["name"]: dict(u) for u in users if isinstance(u, Mapping) and "name" in u}
        return cls(
            api_url=url if isinstance(url, str) else None,
            version=version if isinstance(version, str) and version else None,
            role=role if isinstance(role, str) and role else None,
            users=listed,
            api_address=address,
        )


_T = TypeVar("_T")


def survives_outage(fallback: Callable[..., Any]) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """For `diff` and `read`: a server that cannot answer, or runs another minor than the pin, gives `fallback`
    (no change) and one line on stderr naming the resource, the URL and the error, instead of failing the run."""

    def decorate(method: Callable[..., _T]) -> Callable[..., _T]:
        @functools.wraps(method)
        def wrapper(self: _HeadscaleProvider, id_: str, *args: Any) -> _T:
            try:
                return method(self, id_, *args)
            except SURVIVABLE as exc:
                url = self._client.where if self._client is not None else "(no URL)"
                warn(
                    f"warning: {self.kind} {id_}: {method.__name__} reports no change because Headscale at {url} "
                    f"could not answer: {exc}. Run again once it answers."
                )
                return fallback(id_, *args)

        return wrapper

    return decorate


def asks_again(method: Callable[..., _T]) -> Callable[..., _T]:
    """For `create`, `update` and `delete`: a failure the client remembers is forgotten first, so a server that came
    back in this run (rolled out, restarted, upgraded) is written to; one that does not serve yet is waited for,
    once per run (`HeadscaleClient.write_patience`); one still down then fails this write, and the engine ends the run
    at its first failed write, so there is no storm either."""

    @functools.wraps(method)
    def wrapper(self: _HeadscaleProvider, *args: Any) -> _T:
        if self._client is not None:
            self._client.ask_again(patient=True)
        return method(self, *args)

    return wrapper


def _no_change(id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
    return DiffResult(changes=False, replaces=[])


def _as_recorded(id_: str, props: dict[str, Any]) -> ReadResult:
    return ReadResult(id_, props)


def marked(moment: datetime) -> datetime:
    """`moment` with random, non-zero microseconds: the request's marker. Headscale stores a key's expiration as
    sent (SQLite and PostgreSQL keep microseconds), so after a lost answer the key that call minted is the one whose
    expiration is exactly this, and no other key, however close in time (a collision: 1 in 999,999)."""
    return moment.replace(microsecond=secrets.randbelow(999_999) + 1)


class _HeadscaleProvider(ResourceProvider):
    """Shared plumbing: the client built in `configure`, an injectable clock for rotation decisions.

    `api_url` and `version` are pickled into every resource's state with the provider; `configure` prefers the
    stack config's values (see the module docstring) and falls back to them."""

    serialize_as_secret_always = False  # nothing secret is captured: the key comes from config at run time
    kind = "Headscale object"

    def __init__(self, *, api_url: str | None = None, version: str | None = None) -> None:
        super().__init__()
        self.api_url = api_url
        self.version = version
        self._client: HeadscaleClient | None = None
        self._clock: Callable[[], datetime] | None = None
        self._stack = StackSettings()

    def __getstate__(self) -> dict[str, Any]:
        # Only plain settings travel into Pulumi state; a configured client (with its key) never does.
        return {"api_url": self.api_url, "version": self.version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def configure(self, req: ConfigureRequest) -> None:
        """The URL, address and pin of the stack config as it is now, not as it was when the resource was created."""
        self._stack = StackSettings.from_config(req.config)
        key = req.config.get(API_KEY_CONFIG)
        url = self._stack.api_url or self.api_url
        if key and url:
            address = self._stack.api_address if url == self._stack.api_url else None
            self._client = shared_client(url, key, version=self._stack.version or self.version, connect_to=address)

    def use(self, client: HeadscaleClient, *, clock: Callable[[], datetime] | None = None) -> _HeadscaleProvider:
        """Tests and tools: talk to `client`, decide rotation with `clock`."""
        self._client = client
        self._clock = clock
        return self

    @property
    def client(self) -> HeadscaleClient:
        if self._client is None:
            raise ProviderError(
                f"no Headscale API access: set {API_KEY_CONFIG} (secret) and, if the public URL (at the active "
                f"site's publicAddress) is not reachable from here, {API_URL_CONFIG}"
            )
        return self._client

    def now(self) -> datetime:
        return (self._clock or _utc_now)()


# ------------------------------------------------------------------------------------------------ users
