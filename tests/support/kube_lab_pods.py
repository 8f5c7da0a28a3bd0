"""The lab's kubelet for the pods a test runs for real: Headscale's pod, its restore and its backup.

kwok (tests/support/kube_lab_kwok.py) makes every pod Ready at once, which is what the API server and the engine need
to see, but nothing runs. For the application a lab *holds* (``KubeLab(held_apps=...)``), kwok leaves the pod
Pending; a :class:`PodRunner` then does what the kubelet would, from the pod as the API server has it:

- volumes: ConfigMaps and Secrets are read from the API server (``items``, ``optional``), an ``emptyDir`` is a fresh
  directory that dies with the pod, and a claim is followed to its PersistentVolume; the lab's static NFS volumes
  are one directory per ``server:path`` (:attr:`PodRunner.exports`), shared by every cluster as the export is;
- each container sees its mounts at their pod paths under a root of its own (``<pod>/<container>/<mountPath>``,
  the volume bound there in the container's own mount namespace: this needs root); the pod paths in its
  command, arguments, environment and mounted ConfigMap files are prefixed with that root, nothing else is
  changed, so the scripts and configs run are the rendered ones;
- init containers run in order, each to exit 0 (a failure is recorded and the pod stays Pending, as a crash loop
  would keep it); then the containers start: Litestream (``litestream`` on PATH: the image's entrypoint), the shell
  sidecars, and Headscale itself as :class:`~tests.support.headscale_real.RealHeadscale` on the container's files
  (its identity from the pod's Secret, its database on the pod's volume). Once ``/health`` answers, the pod's
  status becomes Running and Ready, and the Deployment, and the engine's await, see it;
- Headplane's container (no Headplane build exists here) runs ``tests/models/headplane/headplane_standin.js``
  under ``node``, the real one's process name: it starts only on its config file, answers ``/admin/healthz`` and
  commits a row to its SQLite database every 200 ms, logging each to ``<runner root>/writes.log``
  (:func:`headplane_writes`);
- a pod that is deleted (a scale to 0, a rollout) has its processes stopped; :meth:`PodRunner.lose` kills them
  without grace, as a lost site's pods die.

A projected service-account token is a real one (TokenRequest, bound to the pod as the kubelet binds it), so a
sidecar that talks to the API server (the position recorder, the lease renewer) does so as the pod's service account,
under the Role the stack gave it; ``https://kubernetes.default.svc`` reaches the site's API server (a ``curl`` on the
containers' PATH adds ``--connect-to``). The environment takes the downward API's ``fieldRef`` values and expands
``$(VAR)`` as the kubelet does, in the environment, the command and the arguments.

A pod with ``shareProcessNamespace`` (Headscale's pod behind the witness lease) runs as one: its containers, Headscale
included, share a PID namespace of their own (each mounts its own ``/proc``), so that its renewer's fence finds and
stops its writers, and no other pod's; and every container but Headscale has the same root (each binding its own
mounts there), so that a file one container copies between volumes (the gate filling ``serving``) names the same
paths in all of them.
Such a pod's Headscale is not started again once its config is gone (a fence emptied ``serving``): the real one
exits on the directory the kubelet mounts in its place (tests/components/test_serving_lease.py).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from headscale_ha.components.headplane import CONFIG_FILE as HEADPLANE_CONFIG
from headscale_ha.components.headplane import PATHS as HEADPLANE_PATHS
from tests.support.free_ports import free_port
from tests.support.headscale_real import RealHeadscale, release_binary
from tests.support.kube_lab import KubeClient, KubeError
from tests.support.litestream_lab import litestream_bin, stop_group

#: Seconds between two looks at the held pods.
POLL_SECONDS = 0.3
#: Seconds a stopped container gets after SIGTERM before SIGKILL (the pod's grace period, shortened).
STOP_GRACE = 10.0
#: The name every pod resolves to its cluster's API server (the lab's curl connects it to the site's).
SERVICE_HOST = "kubernetes.default.svc"
#: ``$(VAR)`` (expanded when VAR is defined) and ``$$`` (one ``$``), as the kubelet reads them.
REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
APP_LABEL = "app.kubernetes.io/name"
#: Where the Headscale container reads its config (components/headscale.py mounts it there).
CONFIG_PATH = "/etc/headscale/config.yaml"
#: What Headplane's container runs here (see the module docstring).
HEADPLANE_STANDIN = Path(__file__).resolve().parents[1] / "models" / "headplane" / "headplane_standin.js"


@dataclass
class Container:
    """One container as run here: its root (its mounts at their pod paths) and the pod paths it mounts (of a pod
    that shares one root, every container's: each rewrites the others' paths too)."""

    name: str
    root: Path
    mounts: tuple[str, ...]
    #: (volume, place, read-only): bound in the container's own mount namespace, as the kubelet binds volumes (the
    #: scripts refuse a symbolic link where a volume should be).
    binds: list[tuple[Path, Path, bool]] = field(default_factory=list)

    def local(self, text: str) -> str:
        """``text`` with every mounted pod path prefixed with this container's root (longest mount first, whole
        path components only: ``/etc/litestream`` never rewrites ``/etc/litestream-key``)."""
        if not self.mounts:
            return text
        alternatives = "|".join(re.escape(m) for m in sorted(self.mounts, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w./-])({alternatives})(?=[/\"'\s:;,)}}\]]|$)")
        return pattern.sub(lambda found: f"{self.root}{found.group(1)}", text)


@dataclass
class Volumes:
    """A pod's volumes as made here: the directory of each, and which are ConfigMaps (copied per container)."""

    paths: dict[str, Path] = field(default_factory=dict)
    config_maps: set[str] = field(default_factory=set)


@dataclass
class Shared:
    """What the containers of a pod with ``shareProcessNamespace`` share: one root, every mounted pod path, and the
    process that holds their PID namespace (its first process, as a pod's pause container is)."""

    root: Path
    mounts: tuple[str, ...]
    holder: subprocess.Popen[bytes] | None = None


@dataclass
class RunningPod:
    """A held pod this runner started: its processes, its Headscale, and what went wrong."""

    name: str
    uid: str
    root: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    headscale: RealHeadscale | None = None
    failure: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    init_exits: dict[str, int] = field(default_factory=dict)
    #: Set when the pod is gone: a start still under way stops what it started.
    stopped: threading.Event = field(default_factory=threading.Event)
    #: When the runner took the pod up and when it reported it Ready (time.monotonic()): its start, restore included.
    started_at: float = field(default_factory=time.monotonic)
    ready_at: float | None = None
    #: Each container that exited while the pod served (a kubelet restarts it; Headscale is restarted here too):
    #: nothing in a test's story stops a container, so a test asserts this stays empty.
    exits: list[str] = field(default_factory=list)
    #: When each init container exited (time.monotonic()): a gate's, when its site took the Lease.
    init_ended: dict[str, float] = field(default_factory=dict)
    #: The init container running now (a gate may wait for as long as another site holds the Lease).
    init_process: subprocess.Popen[bytes] | None = None
    #: Of a pod that shares its process namespace: its root and PID namespace.
    shared: Shared | None = None
    #: Headplane's stand-in's port (``/admin/healthz``), in a pod that runs one.
    headplane_port: int | None = None
    #: The file Headscale reads its config from (behind its mount): gone after a fence, and then not restarted.
    config: Path | None = None
    #: When Headscale stopped for good (time.monotonic()): its config gone, or its pod stopped.
    headscale_stopped_at: float | None = None


class PodRunner(threading.Thread):
    """Runs the held pods of ``app`` in one namespace of one lab cluster, until :meth:`stop` or :meth:`lose`."""

    def __init__(self, client: KubeClient, namespace: str, app: str, root: Path, exports: Path) -> None:
        super().__init__(name=f"pod-runner-{app}", daemon=True)
        self.client, self.namespace, self.app = client, namespace, app
        self.root, self.exports = root, exports
        self.pods: dict[str, RunningPod] = {}
        self.history: list[RunningPod] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ the loop

    def run(self) -> None:
        while not self._halt.wait(POLL_SECONDS):
            self._restart_exited()
            try:
                listed = self.client.get(
                    f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={APP_LABEL}%3D{self.app}"
                )["items"]
            except (requests.RequestException, KubeError):
                continue  # the API server is down (a lost site): its pods keep running until lost
            self._reconcile(listed)

    def _restart_exited(self) -> None:
        """What the kubelet does for a container of a serving pod that exited: record it, and start Headscale again
        (the pod keeps its volumes; the sidecars' exits are recorded only)."""
        with self._lock:
            serving = [pod for pod in self.pods.values() if pod.ready.is_set() and not pod.stopped.is_set()]
        for pod in serving:
            if pod.headscale is not None and not pod.headscale.running:
                code = pod.headscale.process.returncode if pod.headscale.process is not None else None
                pod.exits.append(f"headscale exited ({code}):\n{pod.headscale.log_tail(20)}")
                if pod.config is not None and not pod.config.is_file():
                    # The real Headscale exits on the directory mounted in its place: the pod no longer serves.
                    pod.exits.append("headscale not started again: its config is gone")
                    pod.headscale_stopped_at = time.monotonic()
                    pod.ready.clear()
                    continue
                try:
                    pod.headscale.start()
                except Exception as exc:  # noqa: BLE001 - a test reads it from the pod
                    pod.failure = f"headscale did not start again: {type(exc).__name__}: {exc}"
                    pod.ready.clear()
            for name, process in pod.processes.items():
                if process.poll() is not None and f"{name} exited ({process.returncode})" not in pod.exits:
                    pod.exits.append(f"{name} exited ({process.returncode})")

    def _reconcile(self, listed: list[dict[str, Any]]) -> None:
        alive = {p["metadata"]["uid"]: p for p in listed if not p["metadata"].get("deletionTimestamp")}
        with self._lock:
            for uid in [uid for uid in self.pods if uid not in alive]:
                self._stop_pod(self.pods.pop(uid), grace=True)
            for uid, pod in alive.items():
                if uid not in self.pods and pod["spec"].get("nodeName") and not pod.get("status", {}).get("podIP"):
                    running = RunningPod(pod["metadata"]["name"], uid, self.root / pod["metadata"]["name"])
                    self.pods[uid] = running
                    self.history.append(running)
                    threading.Thread(target=self._start_pod, args=(running, pod), daemon=True).start()

    def wait_ready(self, timeout: float = 120.0) -> RunningPod:
        """The newest pod once it serves; raises with the pod's failure if it failed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                newest = self.history[-1] if self.history else None
            if newest is not None and newest.failure:
                raise AssertionError(f"pod {newest.name} failed: {newest.failure}")
            if newest is not None and newest.ready.is_set():
                return newest
            time.sleep(0.1)
        raise TimeoutError(f"no {self.app} pod ready within {timeout:.0f}s")

    def serving(self) -> list[RunningPod]:
        with self._lock:
            return [pod for pod in self.pods.values() if pod.ready.is_set()]

    def stop(self, *, grace: bool = True) -> None:
        """Stop looking, and stop every pod's processes (TERM, then KILL; ``grace`` False: KILL at once)."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)
        with self._lock:
            for pod in self.pods.values():
                self._stop_pod(pod, grace=grace)
            self.pods.clear()

    def lose(self) -> None:
        """The site is lost: no more looking, every process killed at once (no final sync, no clean shutdown)."""
        self.stop(grace=False)

    # ------------------------------------------------------------------------------------------ one pod

    def _start_pod(self, running: RunningPod, pod: dict[str, Any]) -> None:
        try:
            volumes = self._volumes(pod, running.root / "volumes")
            spec = pod["spec"]
            self._curl(running.root, spec)
            if spec.get("shareProcessNamespace"):
                running.shared = _shared(running.root, spec)
            for init in spec.get("initContainers", []):
                if running.stopped.is_set():  # deleted while it started: what it started goes with it
                    self._stop_pod(running, grace=False)
                    return
                if init.get("restartPolicy") == "Always":  # a native sidecar: started, and the next one runs
                    self._start_container(running, init, volumes, pod)
                    continue
                code, output = self._run_init(running, init, volumes, pod)
                running.init_exits[init["name"]], running.init_ended[init["name"]] = code, time.monotonic()
                if code != 0:
                    running.failure = f"init container {init['name']} exited {code}:\n{output[-3000:]}"
                    return
            for container in spec["containers"]:
                self._start_container(running, container, volumes, pod)
            if running.stopped.is_set():  # deleted while it started
                self._stop_pod(running, grace=False)
                return
            if running.headscale is None and running.headplane_port is None:
                running.failure = "no headscale or headplane container"
                return
            if running.headplane_port is not None:
                _wait_answers(f"http://127.0.0.1:{running.headplane_port}/admin/healthz", running)
            self._mark_ready(pod)
            running.ready_at = time.monotonic()
            running.ready.set()
        except Exception as exc:  # noqa: BLE001 - a test reads it from the pod
            running.failure = f"{type(exc).__name__}: {exc}"

    def _volumes(self, pod: dict[str, Any], root: Path) -> Volumes:
        volumes = Volumes()
        for volume in pod["spec"].get("volumes", []):
            volumes.paths[volume["name"]] = self._volume(volume, root / volume["name"], pod)
            if "configMap" in volume:
                volumes.config_maps.add(volume["name"])
        return volumes

    def _volume(self, volume: Mapping[str, Any], where: Path, pod: Mapping[str, Any]) -> Path:
        if "persistentVolumeClaim" in volume:
            return self._claimed(volume["persistentVolumeClaim"]["claimName"])
        where.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            self._keys(where, volume["configMap"], "configmaps", decode=False)
        elif "projected" in volume:
            self._projected(where, volume["projected"]["sources"], pod)
        elif "secret" in volume:
            self._keys(where, {**volume["secret"], "name": volume["secret"]["secretName"]}, "secrets", decode=True)
        return where

    def _keys(self, where: Path, source: Mapping[str, Any], kind: str, *, decode: bool) -> None:
        try:
            data = self.client.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{source['name']}").get("data") or {}
        except KubeError as error:
            if error.status == 404 and source.get("optional"):
                return
            raise
        items = {item["key"]: item["path"] for item in source.get("items", [])} or {key: key for key in data}
        for key, path in items.items():
            if key not in data:
                if source.get("optional"):
                    continue
                raise KeyError(f"{kind}/{source['name']} has no key {key!r}")
            target = where / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if decode:
                target.write_bytes(base64.b64decode(data[key]))
            else:
                target.write_text(data[key])

    def _projected(self, where: Path, sources: list[dict[str, Any]], pod: Mapping[str, Any]) -> None:
        """A token of the pod's service account bound to the pod (a real TokenRequest: the API server signs it, RBAC
        and admission judge it), the listed ConfigMap keys and the downward API's fields."""
        for source in sources:
            if "configMap" in source:
                self._keys(where, source["configMap"], "configmaps", decode=False)
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    (where / item["path"]).write_text(field_value(pod, item["fieldRef"]["fieldPath"]))
            elif "serviceAccountToken" in source:
                wanted, meta = source["serviceAccountToken"], pod["metadata"]
                bound = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
                request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": {"expirationSeconds": wanted.get("expirationSeconds", 3600),
                                    "boundObjectRef": bound}}  # fmt: skip
                account = pod["spec"].get("serviceAccountName", "default")
                path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token"
                (where / wanted["path"]).write_text(self.client.create(path, request)["status"]["token"])
            else:
                raise NotImplementedError(f"projected source {sorted(source)}: not run here")

    def _claimed(self, claim: str) -> Path:
        """The directory of the static NFS volume a claim is bound to (``<exports>/<server>/<path>``)."""
        bound = self.client.get(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{claim}")
        volume = bound["spec"].get("volumeName")
        if not volume:
            raise RuntimeError(f"claim {claim} is not bound")
        nfs = self.client.get(f"/api/v1/persistentvolumes/{volume}")["spec"].get("nfs")
        if nfs is None:
            raise RuntimeError(f"volume {volume} of claim {claim} is not an NFS volume: the lab has no other")
        export = self.exports / nfs["server"] / nfs["path"].lstrip("/")
        export.mkdir(parents=True, exist_ok=True)
        return export

    def _container(
        self, running: RunningPod, spec: Mapping[str, Any], volumes: Volumes, *, link: bool = False
    ) -> Container:
        """The container's root: a mounted ConfigMap copied with its pod paths made local (so the files it reads
        name this root); every other mount bound at its pod path when the container starts (``link``: a symbolic
        link instead, for Headscale, which this runner starts itself, in a root of its own). In a pod that shares
        one root, every container but Headscale has it, and rewrites every container's pod paths."""
        shared = running.shared if not link else None
        root = shared.root if shared else running.root / "containers" / spec["name"]
        mounts = spec.get("volumeMounts", [])
        container = Container(spec["name"], root, shared.mounts if shared else tuple(m["mountPath"] for m in mounts))
        for mount in mounts:
            source = volumes.paths[mount["name"]] / mount.get("subPath", "")
            target = root / mount["mountPath"].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if mount.get("subPath") and not source.exists() and mount["name"] not in volumes.config_maps:
                source.mkdir(parents=True)  # the kubelet makes a missing subPath as a directory
            if mount["name"] in volumes.config_maps:
                _copy_rewritten(source, target, container)
            elif link:
                target.symlink_to(source, target_is_directory=source.is_dir())
            else:
                target.mkdir(exist_ok=True) if source.is_dir() else target.touch()
                container.binds.append((source, target, bool(mount.get("readOnly"))))
        return container

    def _environment(self, spec: Mapping[str, Any], container: Container, pod: Mapping[str, Any]) -> dict[str, str]:
        """What the kubelet gives the container: its ``env`` (the downward API's fields, ``$(VAR)`` expanded), the
        API server's address, and a PATH with the image's tools (Litestream, and the lab's curl)."""
        binary = litestream_bin()
        tools = [str(self.root / pod["metadata"]["name"] / "bin"), *([str(binary.parent)] if binary else [])]
        path = os.pathsep.join([*tools, os.environ.get("PATH", "/usr/bin:/bin")])
        api = urlsplit(self.client.server)
        # What the kubelet gives every pod: the API server's address (here the lab's, on loopback).
        env = {"PATH": path, "HOME": str(container.root), "KUBERNETES_SERVICE_HOST": str(api.hostname),
               "KUBERNETES_SERVICE_PORT": str(api.port)}  # fmt: skip
        if "/tmp" in container.mounts:
            env["TMPDIR"] = str(container.root / "tmp")
        defined: dict[str, str] = {}
        for item in spec.get("env", []):
            if "value" in item:
                defined[item["name"]] = expand(item["value"], defined)
            elif "fieldRef" in item.get("valueFrom", {}):
                defined[item["name"]] = field_value(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                raise NotImplementedError(f"{spec['name']}: env {item['name']} from {sorted(item)}: not run here")
        env.update({name: container.local(value) for name, value in defined.items()})
        return env

    def _curl(self, pod_root: Path, spec: Mapping[str, Any]) -> None:
        """The pod's ``curl`` (first on its containers' PATH): the real one, with ``kubernetes.default.svc:443``
        connected to this cluster's API server (whose certificate names it), as a pod's DNS and Service would, and
        Headscale's ``http`` port on 127.0.0.1 connected to where this runner serves it (the pod's network is its
        containers'), once it has a port (``<pod>/headscale-port``)."""
        where, real = pod_root / "bin", shutil.which("curl")
        if real is None:
            raise FileNotFoundError("curl: not on PATH")
        api = urlsplit(self.client.server)
        ports = [p["containerPort"] for c in spec["containers"] if _is_headscale(c) for p in c.get("ports", [])
                 if p.get("name") == "http"]  # fmt: skip
        served = f"${{port:+--connect-to 127.0.0.1:{ports[0]}:127.0.0.1:$port}}" if ports else ""
        where.mkdir(parents=True, exist_ok=True)
        (where / "curl").write_text(
            f"#!/bin/sh\nport=$(cat {pod_root / 'headscale-port'} 2>/dev/null) || port=\n"
            f'exec {real} --connect-to {SERVICE_HOST}:443:{api.hostname}:{api.port} {served} "$@"\n'
        )
        (where / "curl").chmod(0o755)

    def _argv(
        self, spec: Mapping[str, Any], container: Container, env: Mapping[str, str], shared: Shared | None
    ) -> list[str]:
        """The container's command in a mount namespace of its own (``unshare``: root only) where its volumes are
        bound at their places; nothing of it is seen outside, and it goes with the process. In a pod that shares its
        process namespace, it runs in the pod's PID namespace, with a ``/proc`` of that namespace."""
        command = spec.get("command") or (["litestream"] if "litestream" in spec.get("image", "") else [])
        if not command and _is_headplane(spec):  # no path in it: the pod's paths in a command are rewritten
            command = ["node", "-e", "require(process.env.LAB_STANDIN)"]
        if not command:
            raise NotImplementedError(f"{spec['name']}: image {spec.get('image')} has no entrypoint known here")
        binds = ["mount -t proc proc /proc"] if shared else []
        for source, target, read_only in container.binds:
            binds.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
            if read_only:
                binds.append(f"mount -o remount,bind,ro {shlex.quote(str(target))}")
        script = "set -e; " + "; ".join([*binds, 'exec "$@"'])
        local = [container.local(expand(part, env)) for part in [*command, *spec.get("args", [])]]
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *local]
        return [*_in_pid_namespace(shared), *argv]

    def _run_init(
        self, running: RunningPod, spec: Mapping[str, Any], volumes: Volumes, pod: Mapping[str, Any]
    ) -> tuple[int, str]:
        """Run an init container to its exit (as long as it takes: a gate waits while another site holds the
        Lease), or until the pod is stopped."""
        log_path = running.root / f"{spec['name']}.log"
        log_path.write_bytes(b"")
        process = self._launch(running, spec, self._container(running, spec, volumes), pod)
        running.init_process = process
        while process.poll() is None:
            if running.stopped.wait(POLL_SECONDS):
                _stop_group(process, grace=False)
        running.init_process = None
        return process.returncode, log_path.read_text(errors="replace")

    def _start_container(
        self, running: RunningPod, spec: Mapping[str, Any], volumes: Volumes, pod: Mapping[str, Any]
    ) -> None:
        headscale = _is_headscale(spec)
        container = self._container(running, spec, volumes, link=headscale)
        if headscale:
            running.config = _mounted_file(spec, volumes, CONFIG_PATH)
            text = running.config.read_text()
            if running.shared is not None:  # copied by the gate with the shared root's paths: the pod's, again
                text = text.replace(str(running.shared.root), "")
            root = container.root.parent / f"{container.name}-serve"
            exe = release_binary(spec["image"])
            wrap = _in_pid_namespace(running.shared)
            running.headscale = RealHeadscale(text, root, exe=exe, pod_root=container.root, wrap=wrap)
            (running.root / "headscale-port").write_text(str(running.headscale.ports.http))
            running.headscale.start()
            return
        extra = {}
        if _is_headplane(spec):
            running.headplane_port = free_port()
            extra = {"LAB_STANDIN": str(HEADPLANE_STANDIN), "PORT": str(running.headplane_port), "POD": running.name,
                     "HEADPLANE_CONFIG": container.local(HEADPLANE_CONFIG), "WRITE_LOG": str(self.root / "writes.log"),
                     "HEADPLANE_DB": container.local(f"{HEADPLANE_PATHS.data_dir}/hp_persist.db")}  # fmt: skip
        running.processes[spec["name"]] = self._launch(running, spec, container, pod, extra)

    def _launch(
        self,
        running: RunningPod,
        spec: Mapping[str, Any],
        container: Container,
        pod: Mapping[str, Any],
        extra: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a container's process in a session of its own, its output appended to ``<pod>/<name>.log``."""
        env = {**self._environment(spec, container, pod), **(extra or {})}
        with (running.root / f"{spec['name']}.log").open("ab") as log:
            return subprocess.Popen(
                self._argv(spec, container, env, running.shared),
                env=env,
                cwd=container.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _mark_ready(self, pod: Mapping[str, Any]) -> None:
        """What the kubelet reports once every container is started and the readiness probe passes."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        spec = pod["spec"]
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ]
        running = {"running": {"startedAt": now}}
        status = {
            "phase": "Running",
            "podIP": "10.250.0.10",
            "startTime": now,
            "conditions": conditions,
            "containerStatuses": [
                {"name": c["name"], "image": c["image"], "ready": True, "started": True, "restartCount": 0,
                 "state": running}
                for c in spec["containers"]
            ],
            "initContainerStatuses": [
                {"name": c["name"], "image": c["image"], "ready": True, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}
                for c in spec.get("initContainers", [])
            ],
        }  # fmt: skip
        name = pod["metadata"]["name"]
        self.client.merge_patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}/status", {"status": status})

    def _stop_pod(self, running: RunningPod, *, grace: bool) -> None:
        """Stop what the pod runs: Headscale, then the containers in the reverse of their start (the sidecars
        after the main containers, the renewer last), each with SIGTERM and its grace (``grace`` False: SIGKILL)."""
        running.stopped.set()
        if running.init_process is not None:
            _stop_group(running.init_process, grace=False)
        if running.headscale is not None:
            if running.headscale_stopped_at is None:  # now, or later than it stopped by itself: never too early
                running.headscale_stopped_at = time.monotonic()
            if grace:
                running.headscale.close()
            else:
                _kill(running.headscale.process)
                running.headscale.process = None
                running.headscale.close()
        for process in reversed(list(running.processes.values())):
            _stop_group(process, grace=grace)
        if running.shared is not None and running.shared.holder is not None:
            _stop_group(running.shared.holder, grace=False)


def _mounted_file(spec: Mapping[str, Any], volumes: Volumes, pod_path: str) -> Path:
    """The volume file behind ``pod_path`` in a container (a ``subPath`` mount, or a file of a mounted volume)."""
    for mount in spec.get("volumeMounts", []):
        base = volumes.paths[mount["name"]] / mount.get("subPath", "")
        if pod_path == mount["mountPath"]:
            return base
        if pod_path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return base / pod_path[len(mount["mountPath"].rstrip("/")) + 1 :]
    raise KeyError(f"{spec['name']} mounts nothing at {pod_path}")


def _kill(process: subprocess.Popen[Any] | None) -> None:
    """SIGKILL a process and its group when it leads one (the sidecars do; Headscale is a plain child)."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, 9)
        else:
            process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _copy_rewritten(source: Path, target: Path, container: Container) -> None:
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for item in source.iterdir():
            if item.name != ".configmap":
                _copy_rewritten(item, target / item.name, container)
        return
    target.write_text(container.local(source.read_text()))
    shutil.copymode(source, target)


def _is_headscale(container: Mapping[str, Any]) -> bool:
    return "headscale" in container.get("image", "").rsplit("/", 1)[-1]


def _is_headplane(container: Mapping[str, Any]) -> bool:
    return "headplane" in container.get("image", "").rsplit("/", 1)[-1]


def _wait_answers(url: str, running: RunningPod, timeout: float = 20.0) -> None:
    """Until ``url`` answers 200 (a readiness probe), the pod stopped, or ``timeout``: then a RuntimeError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not running.stopped.is_set():
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    if not running.stopped.is_set():
        raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")


def headplane_writes(runner_root: Path) -> list[tuple[str, float]]:
    """(pod, uptime) of every write the Headplane stand-ins of one runner acknowledged, in order."""
    log = runner_root / "writes.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(pod, float(at)) for pod, at in (line.split() for line in lines if line.count(" ") == 1)]


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    """A downward API field of the pod as the API server has it (those the program's pods read)."""
    values = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
    }
    if field_path not in values:
        raise NotImplementedError(f"fieldRef {field_path}: not run here")
    return str(values[field_path])


def expand(text: str, defined: Mapping[str, str]) -> str:
    """``text`` with ``$(VAR)`` replaced by VAR's value when it is defined (left as it is otherwise) and ``$$`` by
    ``$``: the kubelet's expansion of a container's environment, command and arguments."""

    def replace(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        return defined.get(found.group(1), found.group(0))

    return REFERENCE.sub(replace, text)


def _shared(root: Path, spec: Mapping[str, Any]) -> Shared:
    """The root and PID namespace of a pod whose containers share their process namespace."""
    every = [*spec.get("initContainers", []), *spec["containers"]]
    mounted = {m["mountPath"] for c in every for m in c.get("volumeMounts", [])}
    # A directory that holds mounts only (the gate's /serve-from) is the pod's too: named, it is rewritten as well.
    holders = {str(parent) for path in mounted for parent in Path(path).parents if not parent.exists()}
    shared = Shared(root / "shared", tuple(sorted(mounted | holders)))
    shared.root.mkdir(parents=True, exist_ok=True)
    shared.holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "sleep", "infinity"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return shared


def _in_pid_namespace(shared: Shared | None) -> list[str]:
    """The prefix that runs a command in the pod's PID namespace (none for a pod that does not share one)."""
    if shared is None or shared.holder is None:
        return []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the namespace's first process: the child unshare forked
        children = Path(f"/proc/{shared.holder.pid}/task/{shared.holder.pid}/children")
        found = children.read_text().split() if children.exists() else []
        if found:
            return ["nsenter", "--target", found[0], "--pid", "--"]
        time.sleep(0.05)
    raise RuntimeError("the pod's PID namespace did not start")


def _stop_group(process: subprocess.Popen[Any], *, grace: bool) -> None:
    """A container stopped: SIGTERM to its process group (nsenter forwards no signal to what it started) and SIGKILL
    to what is left after STOP_GRACE seconds; ``grace`` False: SIGKILL at once."""
    if grace:
        stop_group(process, timeout=STOP_GRACE)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
