"""Services and what points at them: a Service's selector reaches the pods of one workload and its target ports
are ports those pods declare; a backend (Ingress, route) names a Service and one of its ports; a StatefulSet's
governing Service exists and is headless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import as_dict, as_list, nested
from tools.wiring.model import Holder, PodTemplate, serving_containers
from tools.wiring.selectors import selector_text


def check_service(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """Selector → pod templates; every target port → a declared container port of those templates."""
    spec = as_dict(obj.get("spec"))
    selector = spec.get("selector")
    if spec.get("type") == "ExternalName" or not isinstance(selector, dict) or not selector:
        return
    selected = checker.model.selected(
        holder.namespace, lambda labels: all(labels.get(k) == v for k, v in selector.items())
    )
    if not selected:
        checker.report(
            holder,
            "spec.selector",
            f"selector {selector_text({'matchLabels': selector})} matches no pod template in namespace "
            f"'{holder.namespace}': the Service would have no endpoints (connections refused)",
        )
        return
    workloads = sorted({t.holder.workload for t in selected})
    if len(workloads) > 1:
        checker.report(
            holder,
            "spec.selector",
            f"selector {selector_text({'matchLabels': selector})} matches the pods of {', '.join(workloads)}: "
            "the Service would send its traffic to all of them (give each workload labels of its own)",
        )
    if any(t.spec is None for t in selected):
        return  # an operator's pods: their ports are not known offline
    headless = spec.get("clusterIP") == "None"
    for i, port in enumerate(as_list(spec.get("ports"))):
        if isinstance(port, dict):
            _check_target_port(checker, holder, f"spec.ports[{i}]", port, selected, headless=headless)


def _check_target_port(
    checker: Checker,
    holder: Holder,
    path: str,
    port: Mapping[str, Any],
    selected: list[PodTemplate],
    *,
    headless: bool,
) -> None:
    """A named target port is a port name, a numeric one a containerPort, of the selected pods (same protocol)."""
    owners = ", ".join(t.holder.workload for t in selected)
    protocol = port.get("protocol") or "TCP"
    target = port.get("targetPort", port.get("port"))
    declared = [
        p
        for t in selected
        for c in serving_containers(as_dict(t.spec))
        for p in as_list(c.get("ports"))
        if isinstance(p, dict) and (p.get("protocol") or "TCP") == protocol
    ]
    if isinstance(target, str):
        if not any(p.get("name") == target for p in declared):
            checker.report(
                holder,
                f"{path}.targetPort",
                f"no container of the pod templates it selects ({owners}) declares a {protocol} port named "
                f"'{target}': the endpoints would carry no address for this port, so connections to "
                f"port {port.get('port')} fail",
            )
    elif (
        isinstance(target, int)
        and not isinstance(target, bool)
        and not headless
        and not any(p.get("containerPort") == target for p in declared)
    ):
        defaulted = "" if "targetPort" in port else " (targetPort defaults to port)"
        checker.report(
            holder,
            f"{path}.targetPort",
            f"no container of the pod templates it selects ({owners}) declares containerPort "
            f"{target}/{protocol}{defaulted}: traffic to port {port.get('port')} would go to a port "
            "nothing declares it listens on",
        )


def service_backend(
    checker: Checker, holder: Holder, path: str, name: Any, namespace: str | None, port: Any, consequence: str
) -> None:
    """A backend: the Service resolves and has the port (number or name) the backend names."""
    target = checker.ref(holder, path, "Service", name, namespace=namespace, consequence=consequence)
    if target is None or not isinstance(port, int | str) or isinstance(port, bool):
        return
    if target.obj is not None:
        ports = as_list(nested(target.obj, "spec", "ports"))
        known: frozenset[int | str] | None = frozenset(
            v for p in ports for v in (nested(p, "port"), nested(p, "name")) if isinstance(v, int | str)
        )
    else:
        known = target.ports
    if known is not None and port not in known:
        listed = ", ".join(sorted(str(p) for p in known)) or "none"
        checker.report(
            holder,
            f"{path}.port",
            f"Service '{name}' has no port {port!r} (it has: {listed}): {consequence}",
        )


def check_statefulset(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """The governing Service exists and is headless: that is what gives the pods stable DNS names."""
    service_name = nested(obj, "spec", "serviceName")
    consequence = "the pods would get no stable DNS names (<pod>.<service>)"
    target = checker.ref(holder, "spec.serviceName", "Service", service_name, consequence=consequence)
    if target is not None and target.obj is not None and nested(target.obj, "spec", "clusterIP") != "None":
        checker.report(
            holder,
            "spec.serviceName",
            f"Service '{service_name}' is not headless (clusterIP: None): {consequence}",
        )


RULES = {"Service": check_service, "StatefulSet": check_statefulset}
