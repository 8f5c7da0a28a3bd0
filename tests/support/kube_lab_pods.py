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
- a pod that is deleted (a scale to 0, a rollout) has its processes stopped; :meth:`PodRunner.lose` kills them
  without grace, as a lost site's pods die.

A projected service-account token is a real one (TokenRequest), so a sidecar that talks to the API server (the
position recorder) does so as the pod's service account, under the Role the stack gave it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from tests.support.headscale_real import RealHeadscale, release_binary
from tests.support.kube_lab import KubeClient, KubeError
from tests.support.litestream_lab import litestream_bin, stop_process

#: Seconds between two looks at the held pods.
POLL_SECONDS = 0.3
#: Seconds an init container may run (a restore of the lab's small databases takes about a second).
INIT_TIMEOUT = 300.0
APP_LABEL = "app.kubernetes.io/name"
#: Where the Headscale container reads its config (components/headscale.py mounts it there).
CONFIG_PATH = "/etc/headscale/config.yaml"


@dataclass
class Container:
    """One container as run here: its root (its mounts at their pod paths) and the pod paths it mounts."""

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
            for init in spec.get("initContainers", []):
                if init.get("restartPolicy") == "Always":  # a native sidecar: started, and the next one runs
                    self._start_container(running, init, volumes)
                    continue
                code, output = self._run_init(running, init, volumes)
                running.init_exits[init["name"]] = code
                if code != 0:
                    running.failure = f"init container {init['name']} exited {code}:\n{output[-3000:]}"
                    return
            for container in spec["containers"]:
                self._start_container(running, container, volumes)
            if running.stopped.is_set():  # deleted while it started
                self._stop_pod(running, grace=False)
                return
            if running.headscale is None:
                running.failure = "no headscale container"
                return
            self._mark_ready(pod)
            running.ready_at = time.monotonic()
            running.ready.set()
        except Exception as exc:  # noqa: BLE001 - a test reads it from the pod
            running.failure = f"{type(exc).__name__}: {exc}"

    def _volumes(self, pod: dict[str, Any], root: Path) -> Volumes:
        volumes = Volumes()
        for volume in pod["spec"].get("volumes", []):
            account = pod["spec"].get("serviceAccountName", "default")
            volumes.paths[volume["name"]] = self._volume(volume, root / volume["name"], account)
            if "configMap" in volume:
                volumes.config_maps.add(volume["name"])
        return volumes

    def _volume(self, volume: Mapping[str, Any], where: Path, service_account: str) -> Path:
        if "persistentVolumeClaim" in volume:
            return self._claimed(volume["persistentVolumeClaim"]["claimName"])
        where.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            self._keys(where, volume["configMap"], "configmaps", decode=False)
        elif "projected" in volume:
            self._projected(where, volume["projected"]["sources"], service_account)
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

    def _projected(self, where: Path, sources: list[dict[str, Any]], service_account: str) -> None:
        """A token of the pod's service account (a real TokenRequest: the API server signs it, RBAC judges it) and
        the listed ConfigMap keys."""
        for source in sources:
            if "configMap" in source:
                self._keys(where, source["configMap"], "configmaps", decode=False)
            elif "serviceAccountToken" in source:
                wanted = source["serviceAccountToken"]
                request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": {"expirationSeconds": wanted.get("expirationSeconds", 3600)}}  # fmt: skip
                path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{service_account}/token"
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
        link instead, for Headscale, which this runner starts itself)."""
        root = running.root / "containers" / spec["name"]
        mounts = spec.get("volumeMounts", [])
        container = Container(spec["name"], root, tuple(m["mountPath"] for m in mounts))
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

    def _environment(self, spec: Mapping[str, Any], container: Container) -> dict[str, str]:
        binary = litestream_bin()
        path = os.pathsep.join([*([str(binary.parent)] if binary else []), os.environ.get("PATH", "/usr/bin:/bin")])
        api = urlsplit(self.client.server)
        # What the kubelet gives every pod: the API server's address (here the lab's, on loopback).
        env = {"PATH": path, "HOME": str(container.root), "KUBERNETES_SERVICE_HOST": str(api.hostname),
               "KUBERNETES_SERVICE_PORT": str(api.port)}  # fmt: skip
        if "/tmp" in container.mounts:
            env["TMPDIR"] = str(container.root / "tmp")
        for item in spec.get("env", []):
            if "value" not in item:
                raise NotImplementedError(f"{spec['name']}: env {item['name']} from {sorted(item)}: not run here")
            env[item["name"]] = container.local(item["value"])
        return env

    def _argv(self, spec: Mapping[str, Any], container: Container) -> list[str]:
        """The container's command in a mount namespace of its own (``unshare``: root only) where its volumes are
        bound at their places; nothing of it is seen outside, and it goes with the process."""
        command = spec.get("command") or (["litestream"] if "litestream" in spec.get("image", "") else [])
        if not command:
            raise NotImplementedError(f"{spec['name']}: image {spec.get('image')} has no entrypoint known here")
        binds = []
        for source, target, read_only in container.binds:
            binds.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
            if read_only:
                binds.append(f"mount -o remount,bind,ro {shlex.quote(str(target))}")
        script = "set -e; " + "; ".join([*binds, 'exec "$@"'])
        local = [container.local(part) for part in [*command, *spec.get("args", [])]]
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *local]

    def _run_init(self, running: RunningPod, spec: Mapping[str, Any], volumes: Volumes) -> tuple[int, str]:
        container = self._container(running, spec, volumes)
        done = subprocess.run(
            self._argv(spec, container),
            env=self._environment(spec, container),
            cwd=container.root,
            capture_output=True,
            text=True,
            timeout=INIT_TIMEOUT,
            check=False,
        )
        (running.root / f"{spec['name']}.log").write_text(done.stdout + done.stderr)
        return done.returncode, done.stdout + done.stderr

    def _start_container(self, running: RunningPod, spec: Mapping[str, Any], volumes: Volumes) -> None:
        headscale = "headscale" in spec.get("image", "").rsplit("/", 1)[-1]
        container = self._container(running, spec, volumes, link=headscale)
        if headscale:
            config = _mounted_file(spec, volumes, CONFIG_PATH)
            running.headscale = self._headscale(container, config, release_binary(spec["image"]))
            return
        log = (running.root / f"{spec['name']}.log").open("ab")
        with log:
            running.processes[spec["name"]] = subprocess.Popen(
                self._argv(spec, container),
                env=self._environment(spec, container),
                cwd=container.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _headscale(self, container: Container, config: Path, exe: Path) -> RealHeadscale:
        """Headscale on the container's own files: the rendered config.yaml as the ConfigMap holds it (its pod paths
        mapped by RealHeadscale onto the container's root), its identity keys from the Secret, its policy from the
        ConfigMap, its database on the pod's data volume; ``exe`` is the release the image names."""
        root = container.root.parent / f"{container.name}-serve"
        return RealHeadscale(config.read_text(), root, exe=exe, pod_root=container.root).start()

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
        running.stopped.set()
        if running.headscale is not None:
            if grace:
                running.headscale.close()
            else:
                _kill(running.headscale.process)
                running.headscale.process = None
                running.headscale.close()
        for process in running.processes.values():
            if grace:
                stop_process(process, timeout=10)
            else:
                _kill(process)


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
