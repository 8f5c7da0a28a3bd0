"""Run the real ``headscale`` (built by ``make real-tools``) from a config the program rendered.

Why: the fake Headscale (tests/models/headscale/) and the config renderer are only as right as what they were
written from; the real server is the judge. A rendered config names pod paths (``/etc/headscale/...``,
``/var/lib/headscale/...``) that do not exist here, so every absolute path in it is mapped under a scratch root,
keeping its pod path (``/etc/headscale/policy/policy.json`` -> ``<root>/pod/etc/headscale/policy/policy.json``); an
absolute path this module does not know is refused, so a new path key in the renderer is noticed, never silently
pointed at this machine's ``/etc``. Files the pod mounts from ConfigMaps (the policy) are written from the plan;
the key files the pod mounts from Secrets (redacted in a plan) are generated.

Serving needs two more changes, nothing else: the listen addresses become free loopback ports, and the DERP map
comes from a local file instead of ``derp.urls`` (Headscale fetches those URLs at start and refuses to start when
it cannot, and this machine is offline). ``configtest`` needs neither: it opens the database, reads the keys and
the policy, but binds and fetches nothing.

Everything a process started here does stays under its root, on loopback; every process is stopped (TERM, then
KILL) when its context manager exits.
"""

from __future__ import annotations

import copy
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from headscale_ha.components.headscale import headscale_config_input
from headscale_ha.components.headscale_config import headscale_config_yaml
from headscale_ha.program import args as program_args
from tests.support.free_ports import free_port
from tests.support.headscale_config_samples import stack_config
from tests.support.litestream_lab import stop_group, stop_process
from tools import real_tools

HEADSCALE = "headscale"
PREVIOUS = "headscale-previous"
#: Seconds a start may take before it counts as hung (here one takes about 0.1 s, migrations included).
START_TIMEOUT = 30.0
#: A unix socket path must fit ``sockaddr_un.sun_path`` (108 bytes with its NUL on Linux).
_SOCKET_PATH_MAX = 100
_API_KEY = re.compile(r"hskey-api-[A-Za-z0-9_-]{12}-[A-Za-z0-9_-]+")
_BYPASS = "--bypass-grpc-and-access-database-directly"

#: Path keys of a rendered config, by what the pod finds there.
SECRET_FILES = {("noise", "private_key_path"), ("derp", "server", "private_key_path"), ("oidc", "client_secret_path")}
DATA_FILES = {("database", "sqlite", "path")}
MOUNTED_FILES = {("policy", "path")}
SOCKETS = {("unix_socket",)}


def binary(name: str = HEADSCALE) -> Path:
    """The built binary (``headscale`` or ``headscale-previous``) in the real-tools cache."""
    return real_tools.bin_dir() / name


def release_binary(image: str) -> Path:
    """The built binary of the release an image names (``ghcr.io/juanfont/headscale:0.28.0@sha256:…`` -> the one whose
    ``headscale version`` is v0.28.0): a pod runs the release of its image, as a kubelet would pull it."""
    tag = image.split("@", 1)[0].rsplit(":", 1)[-1].removeprefix("v")
    for name in (HEADSCALE, PREVIOUS):
        found = re.search(r"version v(\S+)", run(binary(name), "version").stdout)
        if found is not None and found.group(1) == tag:
            return binary(name)
    raise HeadscaleError(f"image {image}: neither {HEADSCALE} nor {PREVIOUS} (make real-tools) is release {tag}")


def clean_env() -> dict[str, str]:
    """This environment without ``HEADSCALE_*``: Headscale reads any of them as a config override (viper), and the
    CLI's ``HEADSCALE_CLI_ADDRESS`` would send it to another server."""
    return {key: value for key, value in os.environ.items() if not key.startswith("HEADSCALE_")}


def noise_key() -> str:
    """A private key in the form Headscale writes and reads (``privkey:`` and 64 hex digits)."""
    return "privkey:" + secrets.token_hex(32)


# --- mapping a rendered config ---------------------------------------------------------------------------------


def absolute_paths(config: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Every string value of the config that is an absolute path, by key path (list items by index)."""
    found: dict[tuple[str, ...], str] = {}
    if isinstance(config, Mapping):
        for key, value in config.items():
            found |= absolute_paths(value, (*prefix, str(key)))
    elif isinstance(config, list):
        for index, value in enumerate(config):
            found |= absolute_paths(value, (*prefix, str(index)))
    elif isinstance(config, str) and config.startswith("/"):
        found[prefix] = config
    return found


def _set(config: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = config
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value


def _kind(path: tuple[str, ...]) -> str:
    """What the pod keeps at a path key; a key not listed here is refused (it would escape the scratch root)."""
    for kind, keys in (("secret", SECRET_FILES), ("data", DATA_FILES), ("mounted", MOUNTED_FILES)):
        if path in keys:
            return kind
    if path in SOCKETS:
        return "socket"
    if path[:2] == ("derp", "paths"):
        return "mounted"
    raise ValueError(f"config key {'.'.join(path)} names a path this harness does not map; add it to its table")


def _short_socket(local: Path) -> Path:
    """``local`` when it fits a unix socket address, else the same file name in a short directory of its own under
    /tmp, not created here: Headscale creates it when it serves (:meth:`RealHeadscale.close` removes it), and
    ``configtest`` or an offline ``policy check`` never touch it."""
    if len(str(local)) <= _SOCKET_PATH_MAX:
        return local
    return Path(tempfile.gettempdir()) / f"hs-sock-{secrets.token_hex(6)}" / local.name


def map_paths(
    config: Mapping[str, Any], root: Path, files: Mapping[str, str], *, keep_existing: bool = False
) -> tuple[dict[str, Any], dict[str, Path]]:
    """The config with every absolute path under ``root`` and the files behind them in place.

    ``files``: pod path -> text of the files the pod mounts from ConfigMaps (:func:`pod_files`). Secret files get a
    generated key (the OIDC client secret a dummy), data files their directory, the socket a short enough path.
    ``keep_existing``: a file already at its place is the pod's own (tests/support/kube_lab_pods.py mounted it from
    the Secret or ConfigMap) and is used as it is.
    Returns the mapped config and the mapping (pod path -> local path)."""
    mapped = copy.deepcopy(dict(config))
    where: dict[str, Path] = {}
    for key, pod_path in absolute_paths(config).items():
        local = root / pod_path.lstrip("/")
        kind = _kind(key)
        if kind == "socket":
            local = _short_socket(local)
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
        if keep_existing and local.exists():
            pass
        elif kind == "secret":
            local.write_text(noise_key() if key[-1] == "private_key_path" else "dummy-client-secret")
        elif kind == "mounted":
            if pod_path not in files:
                raise ValueError(f"{'.'.join(key)}: {pod_path} is mounted in the pod, but no file was given for it")
            local.write_text(files[pod_path])
        _set(mapped, key, str(local))
        where[pod_path] = local
    return mapped, where


@dataclass(frozen=True)
class Ports:
    """The loopback ports one server uses; chosen once, so a restart serves at the same URL."""

    http: int
    metrics: int
    grpc: int
    stun: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


#: The local DERP map: one region on a documentation address, enough for Headscale to start (no client uses it).
DERP_MAP = {
    "regions": {
        900: {
            "regionid": 900,
            "regioncode": "local",
            "regionname": "headscale-ha tests",
            "nodes": [{"name": "900a", "regionid": 900, "hostname": "derp.invalid", "ipv4": "192.0.2.1"}],
        }
    }
}


def for_serving(config: Mapping[str, Any], ports: Ports, derp_map: Path) -> dict[str, Any]:
    """What serving here changes on top of :func:`map_paths`: loopback ports, and the DERP map from a local file
    (``derp.urls`` are fetched at start, and a failed fetch stops the start). Nothing else changes."""
    served = copy.deepcopy(dict(config))
    served["listen_addr"] = f"127.0.0.1:{ports.http}"
    served["metrics_listen_addr"] = f"127.0.0.1:{ports.metrics}"
    served["grpc_listen_addr"] = f"127.0.0.1:{ports.grpc}"
    derp = served.setdefault("derp", {})
    derp_map.write_text(yaml.safe_dump(DERP_MAP, sort_keys=False))
    derp["urls"] = []
    derp["paths"] = [*derp.get("paths", []), str(derp_map)]
    if derp.get("server", {}).get("enabled"):
        derp["server"]["stun_listen_addr"] = f"127.0.0.1:{ports.stun}"
    return served


def write_config(config: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


# --- what the plan says the pod mounts -------------------------------------------------------------------------


def headscale_configs(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Every Headscale config.yaml a plan renders (ConfigMap name -> text): a ``config.yaml`` with ``server_url``."""
    found = {}
    for obj in objects:
        text = (obj.get("data") or {}).get("config.yaml") if obj.get("kind") == "ConfigMap" else None
        if isinstance(text, str) and "server_url" in (yaml.safe_load(text) or {}):
            found[obj["metadata"]["name"]] = text
    return found


def pod_files(objects: list[dict[str, Any]], deployment: str = "headscale", container: str = "headscale") -> dict:
    """The files a container reads from ConfigMap volumes, by their path in the pod (path -> text).

    Resolved as the kubelet does: a mount's ``subPath`` is one key of the volume (via ``items`` when listed), a
    mount without one holds every key (or every listed item) as a file."""
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects if "metadata" in o}
    pod = by_name[("Deployment", deployment)]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    (spec,) = [c for c in pod["containers"] if c["name"] == container]
    files: dict[str, str] = {}
    for mount in spec.get("volumeMounts", []):
        source = volumes[mount["name"]].get("configMap")
        if source is None:
            continue
        data = by_name[("ConfigMap", source["name"])].get("data") or {}
        paths = {item["path"]: item["key"] for item in source.get("items", [])} or {key: key for key in data}
        if "subPath" in mount:
            files[mount["mountPath"]] = data[paths[mount["subPath"]]]
        else:
            files |= {f"{mount['mountPath']}/{path}": data[key] for path, key in paths.items()}
    return files


# --- the CLI ---------------------------------------------------------------------------------------------------


def run(exe: Path, *args: str, config: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``exe args [-c config]``; never raises on a non-zero exit (the caller asserts, showing the output)."""
    command = [str(exe), *args, *(["-c", str(config)] if config else [])]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=clean_env(), check=False)


def configtest(config_path: Path, exe: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``headscale configtest``: loads the config, opens (creates) the database, reads the keys and policy file."""
    return run(exe or binary(), "configtest", config=config_path)


def can_bypass(exe: Path) -> bool:
    """Whether ``policy check`` has the offline flag (0.29); 0.28's check is always offline (no database, no users)."""
    return _BYPASS in run(exe, "policy", "check", "--help").stdout


def policy_check(
    policy_path: Path, *, config_path: Path, exe: Path | None = None, live: bool = False
) -> subprocess.CompletedProcess[str]:
    """``headscale policy check --file``: against the running server of ``config_path`` (``live``, over its unix
    socket) or, offline, against its database (0.29's ``--bypass-grpc-...``; 0.28 checks offline without one)."""
    exe = exe or binary()
    offline = [_BYPASS, "--force"] if not live and can_bypass(exe) else []
    return run(exe, "policy", "check", "--file", str(policy_path), *offline, config=config_path)


# --- a running server ------------------------------------------------------------------------------------------


class HeadscaleError(RuntimeError):
    """The real server did not start, or a CLI call failed; the message carries its output or log tail."""


class RealHeadscale:
    """``headscale serve`` from a rendered config, on loopback, with its data under ``root``.

    ``config_text`` is the rendered config.yaml, ``files`` what the pod mounts from ConfigMaps (pod path -> text);
    ``pod_root``: a pod's files already laid out at their pod paths (the lab's kubelet), used instead; ``wrap``: a
    command that runs Headscale (the lab's kubelet enters its pod's PID namespace with ``nsenter``, which forwards no
    signal: so a wrapped server is started in a session of its own and stopped through its process group).
    Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        config_text: str,
        root: Path,
        *,
        exe: Path | None = None,
        files: Mapping[str, str] | None = None,
        pod_root: Path | None = None,
        wrap: Sequence[str] = (),
    ) -> None:
        self.exe = exe or binary()
        self.wrap = tuple(wrap)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ports = Ports.free()
        rendered = yaml.safe_load(config_text)
        mapped, self.paths = map_paths(rendered, pod_root or root / "pod", files or {}, keep_existing=bool(pod_root))
        self.config = for_serving(mapped, self.ports, root / "derp.yaml")
        self.config_path = write_config(self.config, root / "config.yaml")
        self.log_path = root / "headscale.log"
        self.url = f"http://127.0.0.1:{self.ports.http}"
        self.metrics_url = f"http://127.0.0.1:{self.ports.metrics}"
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None

    def __enter__(self) -> RealHeadscale:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> RealHeadscale:
        """Start serving and wait until ``/health`` answers 200; :attr:`start_seconds` records how long it took."""
        if self.running:
            return self
        began = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.wrap, str(self.exe), "serve", "-c", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                start_new_session=bool(self.wrap),
            )
        try:
            self._wait_healthy(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not self.running:
                raise HeadscaleError(f"headscale serve exited ({self.process.returncode}):\n{self.log_tail()}")
            with suppress(requests.RequestException):
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise HeadscaleError(f"headscale serve did not answer /health in time:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL: the data stays, so :meth:`start` serves it again."""
        if self.process is not None:
            if self.wrap:
                stop_group(self.process, timeout=10)
            else:
                stop_process(self.process, timeout=10)
            self.process = None

    def restart(self) -> RealHeadscale:
        """Stop and start on the same config, ports and data (a pod restart that keeps its volume)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, and remove the short socket directory if one was needed (the scratch root is the caller's)."""
        self.stop()
        socket = Path(self.config["unix_socket"])
        if not socket.is_relative_to(self.root):
            shutil.rmtree(socket.parent, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The server's CLI with its config (it talks to the server over the config's unix socket)."""
        return run(self.exe, *args, config=self.config_path, timeout=timeout)

    def create_api_key(self, expiration: str = "1h") -> str:
        """``headscale apikeys create --expiration``: the operator's way to the first API key (bootstrapApiKey)."""
        done = self.cli("apikeys", "create", "--expiration", expiration)
        found = _API_KEY.findall(done.stdout)
        if done.returncode != 0 or not found:
            raise HeadscaleError(f"apikeys create failed ({done.returncode}): {done.stdout}{done.stderr}")
        return found[-1]

    def version(self) -> str:
        """What ``GET /version`` reports (the provider's version probe reads this)."""
        return str(requests.get(f"{self.url}/version", timeout=5).json().get("version"))


@contextmanager
def serving(config_text: str, root: Path, **options: Any) -> Iterator[RealHeadscale]:
    """A started :class:`RealHeadscale`, always stopped on exit."""
    server = RealHeadscale(config_text, root, **options)
    try:
        yield server.start()
    finally:
        server.close()


def program_config(version: str = "0.29.2", *, policy_mode: str = "apply") -> str:
    """The config.yaml the program renders for the hydra stack at ``version`` with the tailnet policy ``policy_mode``
    (``apply``: database mode, the provider writes the policy), through the same functions its plan uses."""
    config = stack_config(version, policy={"mode": policy_mode})
    server = program_args.headscale_server_args(config, program_args.render_stack_policy(config))
    return headscale_config_yaml(headscale_config_input(server))
