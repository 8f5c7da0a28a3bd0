"""Pod Security admission offline: what the admission plugin checks of the pods a workload creates.

The pod (template) of a Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job or CronJob
in a namespace whose ``pod-security.kubernetes.io/enforce`` label is ``baseline`` or ``restricted`` must meet that
level of the Pod Security Standards (the latest version of the rules; Windows exemptions are not modelled).
Used by tools/validate.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tools.wiring.manifest import as_dict, as_list
from tools.wiring.vocabulary import POD_TEMPLATE_PATHS

Finding = tuple[str, str]  # (path in the object, message)


def format_path(parts: Iterable[Any]) -> str:
    """``("spec", "containers", 0, "image")`` -> ``spec.containers[0].image``; the root is ``(root)``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
#: The Pod Security Standards' lists (baseline: capabilities, sysctls, SELinux types; restricted: volume sources).
BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ]
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_SOURCES = frozenset(
    ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"]
)


@dataclass(frozen=True)
class PodTemplate:
    """A pod as admission sees it: its spec, where that spec is in the object, its annotations."""

    spec: dict[str, Any]
    at: str
    annotations: Mapping[str, Any]
    annotations_at: str

    def containers(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(path, container) of every init, regular and ephemeral container."""
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            for index, container in enumerate(as_list(self.spec.get(kind))):
                if isinstance(container, dict):
                    yield f"{self.at}.{kind}[{index}]", container

    def container_contexts(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(path, securityContext) of every container; an absent context is an empty one."""
        for at, container in self.containers():
            yield f"{at}.securityContext", as_dict(container.get("securityContext"))

    @property
    def pod_context(self) -> Mapping[str, Any]:
        return as_dict(self.spec.get("securityContext"))

    def contexts(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """The pod's securityContext, then every container's."""
        yield f"{self.at}.securityContext", self.pod_context
        yield from self.container_contexts()

    def volumes(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for index, volume in enumerate(as_list(self.spec.get("volumes"))):
            if isinstance(volume, dict):
                yield f"{self.at}.volumes[{index}]", volume


def pod_template(obj: dict[str, Any]) -> PodTemplate | None:
    """The pod a workload object makes, or None for kinds that make none (or a template that is not a mapping)."""
    kind = obj.get("kind")
    path = POD_TEMPLATE_PATHS.get(kind) if isinstance(kind, str) else None
    if path is None:
        return None
    node: Any = obj
    for part in path:
        node = as_dict(node).get(part)
    spec = as_dict(node).get("spec")
    if not isinstance(spec, dict):
        return None
    annotations = as_dict(as_dict(as_dict(node).get("metadata")).get("annotations"))
    return PodTemplate(spec, format_path((*path, "spec")), annotations, format_path((*path, "metadata", "annotations")))


def _host_namespaces(pod: PodTemplate) -> Iterator[Finding]:
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.spec.get(name):
            yield f"{pod.at}.{name}", f"{name}: sharing a host namespace is not allowed"


def _host_path_volumes(pod: PodTemplate) -> Iterator[Finding]:
    for at, volume in pod.volumes():
        if "hostPath" in volume:
            yield f"{at}.hostPath", f"volume {volume.get('name')!r}: hostPath volumes are not allowed"


def _host_ports(pod: PodTemplate) -> Iterator[Finding]:
    for at, container in pod.containers():
        for index, port in enumerate(as_list(container.get("ports"))):
            if isinstance(port, dict) and port.get("hostPort"):
                yield f"{at}.ports[{index}].hostPort", "host ports are not allowed"


def _privileged(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        if context.get("privileged"):
            yield f"{at}.privileged", "privileged containers are not allowed"


def _added_capabilities(context: Mapping[str, Any]) -> set[str]:
    return {c for c in as_list(as_dict(context.get("capabilities")).get("add")) if isinstance(c, str)}


def _baseline_capabilities(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        beyond = sorted(_added_capabilities(context) - BASELINE_CAPABILITIES)
        if beyond:
            yield f"{at}.capabilities.add", f"capabilities {beyond} are beyond the baseline set"


def _host_process(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.contexts():
        if as_dict(context.get("windowsOptions")).get("hostProcess"):
            yield f"{at}.windowsOptions.hostProcess", "Windows host processes are not allowed"


def _selinux(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.contexts():
        options = as_dict(context.get("seLinuxOptions"))
        selinux_type = options.get("type", "")
        if (
            not isinstance(selinux_type, str)
            or selinux_type not in SELINUX_TYPES
            or options.get("user")
            or options.get("role")
        ):
            yield f"{at}.seLinuxOptions", "a custom SELinux type, user or role is not allowed"


def _proc_mount(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        if context.get("procMount") not in (None, "Default"):
            yield f"{at}.procMount", f"procMount {context['procMount']!r}: only Default is allowed"


def _unconfined(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.contexts():
        for profile in ("seccompProfile", "appArmorProfile"):
            if as_dict(context.get(profile)).get("type") == "Unconfined":
                yield f"{at}.{profile}.type", f"{profile} Unconfined is not allowed"


def _apparmor_annotations(pod: PodTemplate) -> Iterator[Finding]:
    for key, value in pod.annotations.items():
        allowed = value in ("", "runtime/default") or str(value).startswith("localhost/")
        if str(key).startswith(APPARMOR_ANNOTATION) and not allowed:
            yield f"{pod.annotations_at}.{key}", f"AppArmor profile {value!r} is not allowed"


def _sysctls(pod: PodTemplate) -> Iterator[Finding]:
    for index, sysctl in enumerate(as_list(pod.pod_context.get("sysctls"))):
        name = as_dict(sysctl).get("name")
        if isinstance(sysctl, dict) and (not isinstance(name, str) or name not in SAFE_SYSCTLS):
            yield f"{pod.at}.securityContext.sysctls[{index}]", f"sysctl {sysctl.get('name')!r} is not a safe one"


def _volume_sources(pod: PodTemplate) -> Iterator[Finding]:
    for at, volume in pod.volumes():
        for source in sorted(set(volume) - {"name"} - RESTRICTED_VOLUME_SOURCES):
            yield f"{at}.{source}", f"volume {volume.get('name')!r} of type {source} is not allowed"


def _privilege_escalation(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"{at}.allowPrivilegeEscalation", "must be false"


def _non_root(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        if context.get("runAsNonRoot", pod.pod_context.get("runAsNonRoot")) is not True:
            yield f"{at}.runAsNonRoot", "must be true, on the container or the pod"


def _root_user(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.contexts():
        if context.get("runAsUser") == 0:
            yield f"{at}.runAsUser", "0 (root) is not allowed"


def _seccomp_set(pod: PodTemplate) -> Iterator[Finding]:
    pod_type = as_dict(pod.pod_context.get("seccompProfile")).get("type")
    for at, context in pod.container_contexts():
        if as_dict(context.get("seccompProfile")).get("type", pod_type) not in ("RuntimeDefault", "Localhost"):
            yield f"{at}.seccompProfile.type", "must be RuntimeDefault or Localhost, on the container or the pod"


def _restricted_capabilities(pod: PodTemplate) -> Iterator[Finding]:
    for at, context in pod.container_contexts():
        if "ALL" not in as_list(as_dict(context.get("capabilities")).get("drop")):
            yield f"{at}.capabilities.drop", "must include ALL"
        beyond = sorted(_added_capabilities(context) - {"NET_BIND_SERVICE"})
        if beyond:
            yield f"{at}.capabilities.add", f"only NET_BIND_SERVICE may be added, not {beyond}"


PodRule = Callable[[PodTemplate], Iterator[Finding]]
BASELINE_RULES: tuple[PodRule, ...] = (
    _host_process,
    _host_namespaces,
    _privileged,
    _baseline_capabilities,
    _host_path_volumes,
    _host_ports,
    _unconfined,
    _apparmor_annotations,
    _selinux,
    _proc_mount,
    _sysctls,
)
RESTRICTED_RULES: tuple[PodRule, ...] = (
    *BASELINE_RULES,
    _volume_sources,
    _privilege_escalation,
    _non_root,
    _root_user,
    _seccomp_set,
    _restricted_capabilities,
)
RULES: dict[str, tuple[PodRule, ...]] = {"baseline": BASELINE_RULES, "restricted": RESTRICTED_RULES}


def namespace_levels(objects: Iterable[Any]) -> dict[str, str]:
    """The enforced level of each Namespace among the objects (privileged when unlabelled)."""
    levels: dict[str, str] = {}
    for obj in objects:
        if isinstance(obj, dict) and obj.get("apiVersion") == "v1" and obj.get("kind") == "Namespace":
            meta = as_dict(obj.get("metadata"))
            if meta.get("name") and isinstance(meta["name"], str):
                levels[meta["name"]] = as_dict(meta.get("labels")).get(ENFORCE_LABEL, "privileged")
    return levels


def admission_findings(obj: Any, levels: dict[str, str]) -> list[Finding]:
    """What Pod Security admission refuses in the pods ``obj`` makes, when its namespace is among the objects."""
    pod = pod_template(obj) if isinstance(obj, dict) else None
    if pod is None:
        return []
    namespace = as_dict(obj.get("metadata")).get("namespace") or "default"
    level = levels.get(namespace, "") if isinstance(namespace, str) else ""
    found = [finding for rule in RULES.get(level, ()) for finding in rule(pod)]
    return [(path, f"Pod Security: namespace {namespace!r} enforces {level}: {message}") for path, message in found]
