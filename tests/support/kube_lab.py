"""A lab of real Kubernetes clusters on loopback, for tests that need real actors rather than a fake API.

Each cluster is a real control plane built by ``make real-tools`` (tools/real_tools.py): etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, with kwok as the kubelet of fake nodes, ``<cluster>-node-1`` …. So what
a test sees is what a cluster does: admission (Pod Security included), RBAC, the controllers (Deployments, Jobs,
StatefulSets, garbage collection, namespace deletion, PV binding), scheduling, and pods that turn Running and Ready
(or, for a Job's pods, Succeeded) because kwok plays the kubelet's part through the stages below.

Added, as the sites have them: the program's CustomResourceDefinitions (from ``schemas/crds/*.json``, the documents
of tools/crd_schemas.py), and addresses for ``LoadBalancer`` Services (a thread plays Cilium's LB-IPAM).

Everything listens on 127.0.0.1, on ports the kernel picks; a lab's data, certificates and logs live in one temporary
directory. ``KubeLab`` is a context manager: leaving it (a failed test included) kills every process group it started
and removes that directory. The children also die with the thread that started them (Linux ``PR_SET_PDEATHSIG``), so
a killed test run leaves nothing behind either: start and restart clusters from one long-lived thread (pytest's).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml

from tests.real_tools import require
from tests.support.free_ports import free_port
from tests.support.kube_lab_kwok import kwok_stages
from tools import real_tools

PROJECT_DIR = Path(__file__).resolve().parents[2]
CRD_DIR = PROJECT_DIR / "schemas" / "crds"
#: The real tools a lab runs, by their names in the registry (tests/real_tools.py).
TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "openssl")
DEFAULT_CLUSTERS = ("hydra", "cosmos")
#: Nodes per cluster, as the stack files say (`cluster.nodes`): hydra's spread rules need more than one.
DEFAULT_NODES = {"hydra": 3, "cosmos": 1}
K8S_VERSION = "v1.37.2"
LB_ANNOTATION = "lbipam.cilium.io/ips"
STARTUP_TIMEOUT = 90.0
T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child, before exec: be killed when the thread that started us dies (a SIGKILLed test run too)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def binary(name: str) -> str:
    """The real actor ``name``: the real-tools cache first (what the pins built), then PATH."""
    built = real_tools.bin_dir() / name
    found = str(built) if built.is_file() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name}: not in {real_tools.bin_dir()} nor on PATH; run `make real-tools`")
    return found


def wait_for(check: Callable[[], T], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy (an API error or a refused connection: "not yet"); the
    TimeoutError names ``what`` and the last answer, so that a failed wait says what it was waiting for."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            value = check()
            if value:
                return value
            last = f"not yet: {value!r}"
        except (requests.RequestException, KubeError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s; last: {last}")
        time.sleep(interval)


# --- processes ---------------------------------------------------------------------------------------------------


@dataclass
class Process:
    """One child, in a process group of its own so that killing the group also kills anything it forked."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Where this run's output begins in ``log`` (a restart appends to the same file).
    log_offset: int = field(default=0, repr=False)

    def start(self) -> int:
        """Start (again): a new process, the same command line; its pid."""
        self.log_offset = self.log.stat().st_size if self.log.is_file() else 0
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group (no graceful stop: the lab's data is thrown away, or must survive a crash)."""
        if self.popen is None or self.popen.returncode is not None:  # never started, or already reaped
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def output(self) -> str:
        """What this run (not an earlier one) wrote to the log."""
        if not self.log.is_file():
            return ""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    def crashed(self) -> str | None:
        """The first line of a Go runtime crash (``panic: …`` or ``fatal error: …``) this run died of, if any."""
        return next((line for line in self.output().splitlines() if GO_CRASH.match(line)), None)

    def tail(self, lines: int = 12) -> str:
        """The end of the process's log, for an error message, after the first line of a Go crash if it had one."""
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        crash = self.crashed()
        head = [f"    {crash}", "    ..."] if crash else []
        return "\n".join([*head, *(f"    {line}" for line in text.splitlines()[-lines:])])


#: The first line Go's runtime writes when a program dies of a panic or a fatal error.
GO_CRASH = re.compile(r"^(panic: |fatal error: )")


# --- certificates ------------------------------------------------------------------------------------------------

_OPENSSL_CONF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {sans}
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run([binary("openssl"), *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_pki(directory: Path, cluster: str, service_ip: str) -> None:
    """A cluster's certificates and keys, made with ``openssl`` (P-256, ten years): its CA ``ca``, the API server's
    serving pair ``apiserver`` (127.0.0.1, localhost, the ``kubernetes`` Service), the admin's client pair ``admin``
    (group ``system:masters``), and the service-account signing pair ``sa`` (RSA)."""
    directory.mkdir(parents=True)
    sans = f"IP:127.0.0.1,IP:{service_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
    (directory / "openssl.cnf").write_text(_OPENSSL_CONF.format(sans=sans))
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc", "-days", "3650",
          "-config", "openssl.cnf")  # fmt: skip
    _openssl("req", "-x509", *ec, "-extensions", "ca", "-subj", f"/CN={cluster}-ca", "-keyout", "ca.key",
             "-out", "ca.crt", cwd=directory)  # fmt: skip
    signed = ("-CA", "ca.crt", "-CAkey", "ca.key")
    _openssl("req", "-x509", *ec, *signed, "-extensions", "server", "-subj", "/CN=kube-apiserver",
             "-keyout", "apiserver.key", "-out", "apiserver.crt", cwd=directory)  # fmt: skip
    _openssl("req", "-x509", *ec, *signed, "-extensions", "client", "-subj", "/O=system:masters/CN=lab-admin",
             "-keyout", "admin.key", "-out", "admin.crt", cwd=directory)  # fmt: skip
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


# --- the API -----------------------------------------------------------------------------------------------------


class KubeError(Exception):
    """The API server answered with an error status; ``status``, ``reason`` and ``message`` are its Status's."""

    def __init__(self, method: str, path: str, status: int, reason: str, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class KubeClient:
    """Plain HTTPS to one API server as the lab's admin (client certificate): enough for tests, no client library."""

    def __init__(self, server: str, pki: Path, *, timeout: float = 15) -> None:
        self.server = server
        self.timeout = timeout
        self._session = requests.Session()
        self._session.trust_env = False  # else REQUESTS_CA_BUNDLE beats ``verify``, and a proxy may get loopback
        self._session.verify = str(pki / "ca.crt")
        self._session.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """The decoded JSON answer (the text, for a plain-text endpoint such as /readyz); KubeError on an error."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        answer = self._session.request(method, self.server + path, data=data, headers=headers, timeout=self.timeout)
        try:
            payload = answer.json()
        except ValueError:
            payload = answer.text
        if answer.status_code >= 400:
            status = payload if isinstance(payload, dict) else {"message": payload}
            raise KubeError(method, path, answer.status_code, status.get("reason", ""), status.get("message", ""))
        return payload

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def close(self) -> None:
        self._session.close()


# --- CustomResourceDefinitions ------------------------------------------------------------------------------------

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(name: str) -> tuple[int, int, int]:
    """Kubernetes' order of API versions (GA, then beta, then alpha; higher numbers first): the storage version."""
    match = _VERSION.match(name)
    if match is None:
        return (-1, 0, 0)
    major, stage, minor = match.groups()
    return ({"alpha": 0, "beta": 1}.get(stage or "", 2), int(major), int(minor or 0))


def crd_from_schema(document: dict[str, Any]) -> dict[str, Any]:
    """An ``apiextensions.k8s.io/v1`` CRD from a schema document of tools/crd_schemas.py.

    Only served versions with a schema are kept (v1 requires a schema per version; the others cannot be sent);
    the highest one is stored. A version whose schema has ``status`` gets the status subresource, as upstream's do.
    """
    kind, group = document["kind"], document["group"]
    plural = document["plural"] or kind.lower() + "s"
    served = {name: v["schema"] for name, v in document["versions"].items() if v.get("served") and "schema" in v}
    if not served:
        raise ValueError(f"{plural}.{group}: no served version has a schema")
    storage = max(served, key=version_priority)
    versions = []
    for name in sorted(served, key=version_priority, reverse=True):
        version: dict[str, Any] = {"name": name, "served": True, "storage": name == storage}
        version["schema"] = {"openAPIV3Schema": served[name]}
        if "status" in served[name].get("properties", {}):
            version["subresources"] = {"status": {}}
        versions.append(version)
    names = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    spec = {"group": group, "names": names, "scope": document["scope"], "versions": versions}
    meta: dict[str, Any] = {"name": f"{plural}.{group}", "labels": {"app.kubernetes.io/managed-by": "kube-lab"}}
    if group.endswith((".k8s.io", ".kubernetes.io")):  # protected groups: upstream's carry their approval
        meta["annotations"] = {"api-approved.kubernetes.io": "unapproved, a lab copy of the upstream CRD"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta, "spec": spec}


def lab_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """The CRDs of every ``*.json`` schema document in ``directory`` (the repository's, by default)."""
    return [crd_from_schema(json.loads(path.read_text())) for path in sorted(directory.glob("*.json"))]


def crd_list_path(crd: dict[str, Any]) -> str:
    """Where a CRD's objects of its storage version are listed, across namespaces."""
    spec = crd["spec"]
    (storage,) = [version["name"] for version in spec["versions"] if version["storage"]]
    return f"/apis/{spec['group']}/{storage}/{spec['names']['plural']}"


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


# --- one cluster -------------------------------------------------------------------------------------------------

#: The order the components start in (and the reverse of the order they are killed in).
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: What the fake node offers: enough for the program's pods, whatever their requests.
NODE_RESOURCES = {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"}
#: How often one cluster's kwok may be launched again after a Go crash before a wait fails (Cluster.check_alive).
KWOK_RELAUNCHES = 2
MAX_CLUSTERS = 11  # the index goes into the second octet of 10.96+i and 10.244+i


@dataclass
class Cluster:
    """One cluster of the lab: its addresses (from its index, so that two clusters never overlap), its files
    under ``root``, and its processes."""

    name: str
    index: int
    root: Path
    ports: dict[str, int]
    #: How many fake nodes kwok plays, ``<cluster>-node-1`` … (the stack files' ``cluster.nodes``).
    nodes: int = 1
    #: Applications whose pods kwok leaves Pending (kwok_stages).
    held_apps: tuple[str, ...] = ()
    processes: dict[str, Process] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    #: How often kwok was launched again after a crash (check_alive).
    kwok_relaunches: int = 0
    _client: KubeClient | None = field(default=None, repr=False)
    server: str = field(init=False)
    node_name: str = field(init=False)
    service_cidr: str = field(init=False)
    kubernetes_service_ip: str = field(init=False)
    pod_cidr: str = field(init=False)
    node_ip: str = field(init=False)
    #: The addresses a LoadBalancer Service without the annotation gets, in order.
    lb_pool: list[str] = field(init=False, repr=False)
    #: The directory of its certificates and keys (make_pki).
    pki: Path = field(init=False, repr=False)
    #: This cluster's own kubeconfig (current context: this cluster), as its components use it.
    kubeconfig: Path = field(init=False, repr=False)
    stages: Path = field(init=False, repr=False)

    def __post_init__(self) -> None:
        i = self.index
        self.server, self.node_name = f"https://127.0.0.1:{self.ports['api']}", f"{self.name}-node-1"
        self.service_cidr, self.pod_cidr, self.node_ip = f"10.{96 + i}.0.0/16", f"10.{244 + i}.0.0/16", f"172.18.{i}.10"
        self.kubernetes_service_ip = str(ipaddress.ip_network(self.service_cidr)[1])
        self.lb_pool = [str(ip) for ip in ipaddress.ip_network(f"172.19.{i}.0/24").hosts()][99:]
        self.pki, self.stages, self.kubeconfig = self.root / "pki", self.root / "kwok.yaml", self.root / "kubeconfig"

    @property
    def node_names(self) -> list[str]:
        return [f"{self.name}-node-{k}" for k in range(1, self.nodes + 1)]

    @classmethod
    def prepare(cls, name: str, index: int, root: Path, nodes: int = 1, held_apps: tuple[str, ...] = ()) -> Cluster:
        """Ports, certificates, kubeconfig and kwok's stages: everything but the processes."""
        ports = {component: free_port() for component in ("etcd", "etcd-peer", "api", "kcm", "scheduler")}
        cluster = cls(name, index, root, ports, nodes, held_apps=held_apps)
        make_pki(root / "pki", name, cluster.kubernetes_service_ip)
        cluster.kubeconfig.write_text(yaml.safe_dump(kubeconfig_document([cluster], current=name)))
        cluster.stages.write_text(yaml.safe_dump_all(kwok_stages(cluster.held_apps), sort_keys=False, width=200))
        return cluster

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            self._client = KubeClient(self.server, self.pki)
        return self._client

    def launch(self, component: str) -> None:
        """Start ``component`` (again, for the API server after ``kill``), logging to ``<root>/<component>.log``."""
        env = dict(os.environ, KWOK_WORKDIR=str(self.root / "kwok")) if component == "kwok" else None
        argv, log = [binary(component), *_ARGS[component](self)], self.root / f"{component}.log"
        process = self.processes.setdefault(component, Process(component, argv, log, env))
        self.pids.append(process.start())

    def set_failing_jobs(self, failing: bool) -> None:
        """From now on a Job's pod fails (or, again, completes): kwok restarted on its stages with or without."""
        self.stages.write_text(yaml.safe_dump_all(kwok_stages(self.held_apps, failing_jobs=failing), sort_keys=False,
                                                  width=200))  # fmt: skip
        self.processes["kwok"].kill()
        for node in self.node_names:  # else the new kwok waits for the old one's node leases to expire (40 s)
            with contextlib.suppress(KubeError):
                self.client.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
        self.launch("kwok")
        # Without their leases the node controller may have marked the nodes unreachable (tainted: no pod is
        # scheduled) before the new kwok renewed them: a pod created now could wait longer than any test does.
        self.wait(lambda: all(self._node_serves(node) for node in self.node_names), "kwok back: every node Ready")

    def _node_serves(self, node: str) -> bool:
        """The node's lease is held and renewed, it is Ready, and it has none of the node controller's taints."""
        lease = self.client.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
        status = self.client.get(f"/api/v1/nodes/{node}")
        ready = [c for c in status.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        taints = {t["key"] for t in status.get("spec", {}).get("taints", [])}
        return (
            bool(lease.get("spec", {}).get("renewTime"))
            and [c["status"] for c in ready] == ["True"]
            and not taints & {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}
        )

    def kill_all(self) -> None:
        for component in reversed(COMPONENTS):
            if component in self.processes:
                self.processes[component].kill()
        if self._client is not None:
            self._client.close()
            self._client = None

    def check_alive(self) -> None:
        """Raise, with its log's tail, when a component that was started has exited: no point waiting for it.

        kwok alone is launched again when it died of a Go crash, at most ``KWOK_RELAUNCHES`` times per cluster: it
        plays the nodes' kubelets, and v0.7.0 can panic in its node stage matcher while it starts
        (``lifecycle.(*Stage).match``, seen once after ``set_failing_jobs``); a kubelet's supervisor restarts it too.
        Any other exit, and a crash beyond that budget, still fails the wait."""
        for process in self.processes.values():
            if process.popen is not None and not process.running():
                crash = process.crashed()
                if process.name == "kwok" and crash and self.kwok_relaunches < KWOK_RELAUNCHES:
                    self.kwok_relaunches += 1
                    print(f"kube_lab: {self.name}: kwok crashed ({crash}); launched again", file=sys.stderr)
                    self.pids.append(process.start())
                    continue
                code = process.popen.returncode
                raise RuntimeError(f"{self.name}: {process.name} exited ({code}); {process.log}:\n{process.tail()}")

    def wait(self, check: Callable[[], T], what: str, timeout: float = STARTUP_TIMEOUT) -> T:
        """``wait_for`` that gives up as soon as a component dies."""

        def alive_and(check: Callable[[], T] = check) -> T:
            self.check_alive()
            return check()

        return wait_for(alive_and, timeout=timeout, what=f"{self.name}: {what}")

    def wait_etcd(self) -> None:
        url = f"http://127.0.0.1:{self.ports['etcd']}/health"
        with requests.Session() as session:
            session.trust_env = False
            self.wait(lambda: session.get(url, timeout=2).json().get("health") == "true", "etcd healthy")

    def wait_api_server(self) -> None:
        self.wait(lambda: self.client.get("/readyz") == "ok", "the API server's /readyz")

    def register(self, crds: list[dict[str, Any]]) -> None:
        """Register the fake nodes (kwok then manages them) and create the CRDs."""
        for number in range(1, self.nodes + 1):
            self.client.create("/api/v1/nodes", node_manifest(self, number))
        for crd in crds:
            self.client.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

    def node_ready(self, name: str = "") -> bool:
        """Ready, and no longer tainted not-ready/unreachable by the node lifecycle controller: pods can land."""
        node = self.client.get(f"/api/v1/nodes/{name or self.node_name}")
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
        taints = [t for t in node["spec"].get("taints", []) if t["key"].startswith("node.kubernetes.io/")]
        return ready and not taints

    def wait_ready(self, crds: list[dict[str, Any]]) -> None:
        """The node Ready, the ``default`` service account made (the controllers run), every CRD Established and
        served (Established comes first: until its watch cache is filled, a resource answers 429)."""
        for node in self.node_names:
            self.wait(lambda node=node: self.node_ready(node), f"node {node} Ready")
        self.wait(lambda: self.client.get("/api/v1/namespaces/default/serviceaccounts/default"), "default SA")
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        for crd in crds:
            name = crd["metadata"]["name"]
            self.wait(lambda name=name: _established(self.client.get(path + name)), f"CRD {name} Established")
            self.wait(lambda crd=crd: "items" in self.client.get(crd_list_path(crd) + "?limit=1"), f"{name} served")


def _etcd_args(c: Cluster) -> list[str]:
    client, peer = f"http://127.0.0.1:{c.ports['etcd']}", f"http://127.0.0.1:{c.ports['etcd-peer']}"
    return [
        f"--name={c.name}", f"--data-dir={c.root / 'etcd'}", f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}", f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={c.name}={peer}", "--unsafe-no-fsync", "--log-level=warn",
    ]  # fmt: skip


def _api_server_args(c: Cluster) -> list[str]:
    """Loopback only: advertising 127.0.0.1 means no endpoints for the ``kubernetes`` Service (they would be refused
    as loopback), as the API server's own test server does. Admission plugins: the defaults (Pod Security on)."""
    pki = c.pki
    return [
        f"--etcd-servers=http://127.0.0.1:{c.ports['etcd']}", "--bind-address=127.0.0.1",
        f"--secure-port={c.ports['api']}", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={c.service_cidr}", f"--cert-dir={c.root / 'apiserver'}", "--profiling=false",
    ]  # fmt: skip


def _controller_manager_args(c: Cluster) -> list[str]:
    """Every default controller; a service-account key and root CA (tokens), the CA as the CSR signer."""
    pki = c.pki
    return [
        f"--kubeconfig={c.kubeconfig}", "--leader-elect=false", "--controllers=*", f"--cluster-name={c.name}",
        "--bind-address=127.0.0.1", f"--secure-port={c.ports['kcm']}", f"--cert-dir={c.root / 'kcm'}",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--profiling=false",
    ]  # fmt: skip


def _scheduler_args(c: Cluster) -> list[str]:
    return [
        f"--kubeconfig={c.kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={c.ports['scheduler']}", f"--cert-dir={c.root / 'scheduler'}", "--profiling=false",
    ]  # fmt: skip


def _kwok_args(c: Cluster) -> list[str]:
    """kwok as the kubelet of the one node, with the stages above (no kwok server: nothing needs logs or exec)."""
    return [
        f"--kubeconfig={c.kubeconfig}", f"--config={c.stages}",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds=40",
    ]  # fmt: skip


_ARGS: dict[str, Callable[[Cluster], list[str]]] = {
    "etcd": _etcd_args,
    "kube-apiserver": _api_server_args,
    "kube-controller-manager": _controller_manager_args,
    "kube-scheduler": _scheduler_args,
    "kwok": _kwok_args,
}


def node_manifest(c: Cluster, number: int = 1) -> dict[str, Any]:
    """Fake node ``number``, registered as a kubelet would (status included: a Node may be created with its status);
    each node has a /24 of the cluster's pod range and an address of its own."""
    name, pod_cidr, ip = (
        f"{c.name}-node-{number}",
        f"10.{244 + c.index}.{number - 1}.0/24",
        f"172.18.{c.index}.{9 + number}",
    )
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    addresses = [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]
    status = {"addresses": addresses, "capacity": NODE_RESOURCES, "allocatable": NODE_RESOURCES}
    meta = {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}}
    spec = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_document(clusters: list[Cluster], *, current: str = "") -> dict[str, Any]:
    """A kubeconfig with one context per cluster, named after it (certificates inline: the file stands alone)."""
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": current,
        "clusters": [{"name": c.name,
                      "cluster": {"server": c.server, "certificate-authority-data": _b64(c.pki / "ca.crt")}}
                     for c in clusters],
        "users": [{"name": f"{c.name}-admin", "user": {"client-certificate-data": _b64(c.pki / "admin.crt"),
                                                        "client-key-data": _b64(c.pki / "admin.key")}}
                  for c in clusters],
        "contexts": [{"name": c.name, "context": {"cluster": c.name, "user": f"{c.name}-admin"}} for c in clusters],
    }  # fmt: skip


# --- LoadBalancer addresses ----------------------------------------------------------------------------------------


def _ingress_ips(service: dict[str, Any]) -> list[str]:
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [entry["ip"] for entry in ingress if entry.get("ip")]


def assign_addresses(client: KubeClient, pool: list[str]) -> list[str]:
    """One pass of the lab's LB-IPAM: every LoadBalancer Service gets the first address of its
    ``lbipam.cilium.io/ips`` annotation, else keeps what it has, else takes the pool's next free address.
    Returns the ``namespace/name`` of the Services it patched."""
    services = client.get("/api/v1/services")["items"]
    used = {ip for service in services for ip in _ingress_ips(service)}
    patched = []
    for service in services:
        if service["spec"].get("type") != "LoadBalancer":
            continue
        current = _ingress_ips(service)
        annotation = (service["metadata"].get("annotations") or {}).get(LB_ANNOTATION, "")
        wanted = next((ip for ip in re.split(r"[,\s]+", annotation) if ip), None) or next(iter(current), None)
        wanted = wanted or next((ip for ip in pool if ip not in used), None)
        if wanted is None or current == [wanted]:
            continue
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        status = {"status": {"loadBalancer": {"ingress": [{"ip": wanted}]}}}
        client.merge_patch(f"/api/v1/namespaces/{namespace}/services/{name}/status", status)
        used.add(wanted)
        patched.append(f"{namespace}/{name}")
    return patched


class LoadBalancerAddresser(threading.Thread):
    """Cilium's LB-IPAM, as far as the lab needs it: a pass over every cluster every ``interval`` seconds. An API
    server that is down (stopped by a test) is skipped until it is back."""

    def __init__(self, clusters: list[Cluster], interval: float = 0.3) -> None:
        super().__init__(name="kube-lab-lb-ipam", daemon=True)
        self.interval = interval
        self._clients = [(KubeClient(c.server, c.pki, timeout=5), c.lb_pool) for c in clusters]
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            for client, pool in self._clients:
                with contextlib.suppress(requests.RequestException, KubeError):
                    assign_addresses(client, pool)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)
        for client, _ in self._clients:
            client.close()


# --- the lab -----------------------------------------------------------------------------------------------------


class KubeLab:
    """Real clusters by name (default hydra and cosmos), started on entry and torn down on exit, whatever happened.

    The clusters start side by side, phase by phase (all etcds, then all API servers, then the rest), so the
    startup costs about one cluster's; ``startup_seconds`` says what it cost. ``kubeconfig`` is one file whose
    contexts are named after the clusters (no current context: a tool must say which cluster it means).
    """

    def __init__(
        self,
        names: tuple[str, ...] = DEFAULT_CLUSTERS,
        *,
        crd_dir: Path | None = CRD_DIR,
        nodes: dict[str, int] | None = None,
        held_apps: tuple[str, ...] = (),
    ) -> None:
        if len(set(names)) != len(names) or not 0 < len(names) <= MAX_CLUSTERS:
            raise ValueError(f"KubeLab: 1 to {MAX_CLUSTERS} distinct cluster names, not {names!r}")
        self.names = tuple(names)
        self.nodes = DEFAULT_NODES if nodes is None else nodes
        self.crd_dir = crd_dir
        #: Applications whose pods kwok leaves Pending, for tests/support/kube_lab_pods.py to run for real.
        self.held_apps = held_apps
        self.root: Path | None = None
        self.clusters: dict[str, Cluster] = {}
        self.startup_seconds: float | None = None
        self._addresser: LoadBalancerAddresser | None = None

    def __enter__(self) -> KubeLab:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start every cluster and wait until each is ready; on any failure, tear down what had started."""
        began = time.monotonic()
        atexit.register(self.close)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - began

    def _start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kube-lab-"))
        crds = lab_crds(self.crd_dir) if self.crd_dir is not None else []
        clusters = [
            Cluster.prepare(name, i, self.root / name, self.nodes.get(name, 1), self.held_apps)
            for i, name in enumerate(self.names)
        ]
        self.clusters = {c.name: c for c in clusters}
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig_document(clusters)))
        for component, ready in (("etcd", Cluster.wait_etcd), ("kube-apiserver", Cluster.wait_api_server)):
            for cluster in clusters:
                cluster.launch(component)
            for cluster in clusters:
                ready(cluster)
        for cluster in clusters:
            for component in COMPONENTS[2:]:
                cluster.launch(component)
            cluster.register(crds)
        self._addresser = LoadBalancerAddresser(clusters)
        self._addresser.start()
        for cluster in clusters:
            cluster.wait_ready(crds)

    def close(self) -> None:
        """Kill every process group, remove the temporary directory. Safe to call twice."""
        atexit.unregister(self.close)
        if self._addresser is not None:
            self._addresser.stop()
            self._addresser = None
        for cluster in reversed(list(self.clusters.values())):
            cluster.kill_all()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def kubeconfig(self) -> Path:
        """The lab's kubeconfig: one context per cluster, named after it."""
        if self.root is None:
            raise RuntimeError("KubeLab: not started")
        return self.root / "kubeconfig"

    def cluster(self, name: str) -> Cluster:
        return self.clusters[name]

    def kubeconfig_path(self, name: str) -> Path:
        """One cluster's own kubeconfig (its context current)."""
        return self.clusters[name].kubeconfig

    def client(self, name: str) -> KubeClient:
        return self.clusters[name].client

    def pids(self) -> list[int]:
        """Every process the lab ever started (a restarted API server counts twice)."""
        return [pid for cluster in self.clusters.values() for pid in cluster.pids]

    def stop_api_server(self, name: str) -> None:
        """Kill one cluster's API server (SIGKILL: it is gone, as for a site whose control plane died); its etcd,
        controllers and kwok keep running and retrying. Once this returns, its port refuses connections."""
        self.clusters[name].processes["kube-apiserver"].kill()

    def start_api_server(self, name: str) -> None:
        """Start it again, on the same port with the same etcd (so the same objects), and wait for /readyz."""
        cluster = self.clusters[name]
        cluster.launch("kube-apiserver")
        cluster.wait_api_server()

    def rebuild(self, name: str) -> None:
        """The cluster lost for good and built again empty, as a site's operators would: every component killed,
        etcd's data and kwok's state deleted, then the same ports and certificates (so the same kubeconfig) with
        nothing in it but its nodes and the CRDs."""
        cluster = self.clusters[name]
        cluster.kill_all()
        cluster.processes.clear()  # a killed one would count as dead while its successor starts
        for data in ("etcd", "kwok"):
            shutil.rmtree(cluster.root / data, ignore_errors=True)
        crds = lab_crds(self.crd_dir) if self.crd_dir is not None else []
        cluster.launch("etcd")
        cluster.wait_etcd()
        cluster.launch("kube-apiserver")
        cluster.wait_api_server()
        for component in COMPONENTS[2:]:
            cluster.launch(component)
        cluster.register(crds)
        cluster.wait_ready(crds)


@contextlib.contextmanager
def running_lab(names: tuple[str, ...] = DEFAULT_CLUSTERS, *, held_apps: tuple[str, ...] = ()) -> Iterator[KubeLab]:
    """A lab for a fixture (e.g. session-scoped): skips, naming what is missing, unless every tool is present."""
    require(*TOOLS)
    with KubeLab(names, held_apps=held_apps) as lab:
        yield lab
