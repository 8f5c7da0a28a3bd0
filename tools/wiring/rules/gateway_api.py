"""Gateway API: a route's parents resolve to a Gateway with a listener that accepts it (kind, protocol, namespace,
hostname), its backends to Services with the port they name, and a cross-namespace reference is allowed by a
ReferenceGrant; a Gateway's listener certificates resolve and hold a key pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import api_group, as_dict, as_list, nested, ref_name
from tools.wiring.model import Holder
from tools.wiring.rules.services import service_backend
from tools.wiring.vocabulary import GATEWAY_GROUP, ROUTE_PROTOCOLS, TLS_KEYS


def hostnames_intersect(route: Sequence[Any], listener: Any) -> bool:
    """Gateway API hostname matching: a wildcard `*.a.b` stands for one or more leading labels."""
    if not isinstance(listener, str) or not listener or not route:
        return True

    def covers(wild: str, host: str) -> bool:
        return wild.startswith("*.") and host.endswith(wild[1:]) and len(host) > len(wild) - 1

    for host in route:
        if not isinstance(host, str):
            return True
        if host == listener or covers(listener, host) or covers(host, listener):
            return True
    return False


def _granted(
    checker: Checker, from_kind: str, from_ns: str | None, to_group: str, to_kind: str, to_ns: str | None, to_name: str
) -> bool:
    """A ReferenceGrant in the target namespace allowing this cross-namespace reference (or a documented one)."""
    model = checker.model
    if any(k == "ReferenceGrant" and ns == to_ns for (k, ns, _n) in model.externals):
        return True
    for (kind, namespace, _), target in model.targets.items():
        if kind != "ReferenceGrant" or namespace != to_ns or target.obj is None:
            continue
        spec = as_dict(target.obj.get("spec"))
        allowed_from = any(
            nested(f, "group") == GATEWAY_GROUP and nested(f, "kind") == from_kind and nested(f, "namespace") == from_ns
            for f in as_list(spec.get("from"))
        )
        allowed_to = any(
            (nested(t, "group") or "") == to_group
            and nested(t, "kind") == to_kind
            and (nested(t, "name") in (None, "", to_name))
            for t in as_list(spec.get("to"))
        )
        if allowed_from and allowed_to:
            return True
    return False


def _cross_namespace(
    checker: Checker, holder: Holder, path: str, from_kind: str, to_group: str, to_kind: str, to_ns: str, name: str
) -> None:
    if to_ns != holder.namespace and not _granted(checker, from_kind, holder.namespace, to_group, to_kind, to_ns, name):
        checker.report(
            holder,
            path,
            f"refers to {to_kind} '{to_ns}/{name}' in another namespace and no ReferenceGrant in '{to_ns}' "
            "allows it: the controller would report ResolvedRefs=False (RefNotPermitted)",
        )


def check_route(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """Gateway API route: parents (and the listener it attaches to) and backends resolve."""
    if api_group(obj) != GATEWAY_GROUP:
        return
    kind, spec = str(obj["kind"]), as_dict(obj.get("spec"))
    for i, parent in enumerate(as_list(spec.get("parentRefs"))):
        if (nested(parent, "group") or GATEWAY_GROUP) == GATEWAY_GROUP and (nested(parent, "kind") or "Gateway") == (
            "Gateway"
        ):
            _parent(checker, holder, f"spec.parentRefs[{i}]", kind, spec, as_dict(parent))
    for i, rule in enumerate(as_list(spec.get("rules"))):
        refs = [
            (f"spec.rules[{i}].backendRefs[{j}]", ref) for j, ref in enumerate(as_list(nested(rule, "backendRefs")))
        ]
        for j, route_filter in enumerate(as_list(nested(rule, "filters"))):
            mirror = nested(route_filter, "requestMirror", "backendRef")
            refs.append((f"spec.rules[{i}].filters[{j}].requestMirror.backendRef", mirror))
        for path, ref in refs:
            _backend(checker, holder, kind, i, path, ref)


def _backend(checker: Checker, holder: Holder, kind: str, rule: int, path: str, ref: Any) -> None:
    """One backendRef (or mirror) of a route's rule: a Service with the port it names, reachable across namespaces."""
    if not isinstance(ref, dict):
        return
    if (ref.get("group") or "") != "" or (ref.get("kind") or "Service") != "Service":
        return
    namespace = ref_name(ref.get("namespace")) or holder.namespace
    name = ref_name(ref.get("name"))
    if name is None or namespace is None:
        return
    consequence = f"the route would report ResolvedRefs=False (BackendNotFound) and fail requests for rule {rule}"
    if ref.get("port") is None:
        checker.report(holder, f"{path}.port", f"backendRef to Service '{name}' has no port: {consequence}")
    service_backend(checker, holder, path, name, namespace, ref.get("port"), consequence)
    _cross_namespace(checker, holder, path, kind, "", "Service", namespace, name)


def _parent(
    checker: Checker, holder: Holder, path: str, kind: str, spec: Mapping[str, Any], parent: Mapping[str, Any]
) -> None:
    """The parent Gateway resolves, has the listener the ref names, and one such listener accepts the route."""
    namespace = ref_name(parent.get("namespace")) or holder.namespace
    name = ref_name(parent.get("name"))
    if name is None:
        return
    target = checker.ref(
        holder,
        path,
        "Gateway",
        name,
        namespace=namespace,
        consequence="the route would never be Accepted: no traffic reaches its backends",
    )
    if target is None or target.obj is None:
        return
    listeners = [lst for lst in as_list(nested(target.obj, "spec", "listeners")) if isinstance(lst, dict)]
    section, port = parent.get("sectionName"), parent.get("port")
    candidates = [
        lst
        for lst in listeners
        if (section is None or lst.get("name") == section) and (port is None or lst.get("port") == port)
    ]
    if not candidates:
        names = ", ".join(f"{lst.get('name')}:{lst.get('port')}" for lst in listeners) or "none"
        wanted = f"named '{section}'" if section is not None else ""
        wanted += f"{' and ' if wanted else ''}on port {port}" if port is not None else ""
        checker.report(
            holder,
            f"{path}.sectionName" if section is not None else path,
            f"Gateway '{name}' has no listener {wanted} (listeners: {names}): the route would not be "
            "Accepted (NoMatchingParent)",
        )
        return
    reasons = []
    for listener in candidates:
        reason = _refuses(kind, spec, listener, namespace, holder.namespace)
        if reason is None:
            return
        reasons.append(f"{listener.get('name')}: {reason}")
    checker.report(
        holder,
        path,
        f"no listener of Gateway '{name}' would accept this {kind} ({'; '.join(reasons)}): the route would "
        "not be Accepted and no traffic reaches its backends",
    )


def _refuses(
    kind: str, spec: Mapping[str, Any], listener: Mapping[str, Any], gateway_ns: str | None, route_ns: str | None
) -> str | None:
    """Why a listener would not take the route (Gateway API attachment rules), or None."""
    protocol = listener.get("protocol")
    allowed_kinds = [k for k in as_list(nested(listener, "allowedRoutes", "kinds")) if isinstance(k, dict)]
    if allowed_kinds:
        if not any((k.get("group") or GATEWAY_GROUP) == GATEWAY_GROUP and k.get("kind") == kind for k in allowed_kinds):
            return f"allowedRoutes.kinds excludes {kind} (NotAllowedByListeners)"
    elif kind in ROUTE_PROTOCOLS and protocol not in ROUTE_PROTOCOLS[kind]:
        return f"protocol {protocol} does not carry {kind} (NotAllowedByListeners)"
    origin = nested(listener, "allowedRoutes", "namespaces", "from") or "Same"
    if origin == "Same" and route_ns != gateway_ns:
        return f"it only takes routes from namespace '{gateway_ns}' (NotAllowedByListeners)"
    if origin == "None":
        return "it takes no routes (NotAllowedByListeners)"
    hostnames = as_list(spec.get("hostnames"))
    if not hostnames_intersect(hostnames, listener.get("hostname")):
        return f"hostname {listener.get('hostname')} matches none of {hostnames} (NoMatchingListenerHostname)"
    return None


def check_gateway(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """Listener certificates resolve (cert-manager's Secrets count) and hold a key pair."""
    if api_group(obj) != GATEWAY_GROUP:
        return
    for i, listener in enumerate(as_list(nested(obj, "spec", "listeners"))):
        for j, ref in enumerate(as_list(nested(listener, "tls", "certificateRefs"))):
            if not isinstance(ref, dict):
                continue
            if (ref.get("group") or "") != "" or (ref.get("kind") or "Secret") != "Secret":
                continue
            path = f"spec.listeners[{i}].tls.certificateRefs[{j}]"
            namespace = ref_name(ref.get("namespace")) or holder.namespace
            name = ref_name(ref.get("name"))
            if name is None or namespace is None:
                continue
            checker.ref(
                holder,
                path,
                "Secret",
                name,
                namespace=namespace,
                consequence=f"listener '{nested(listener, 'name')}' would be ResolvedRefs=False "
                "(InvalidCertificateRef): TLS on it would not be served",
                keys=[(key, path) for key in TLS_KEYS],
                key_consequence="the listener cannot load the certificate (InvalidCertificateRef)",
            )
            _cross_namespace(checker, holder, path, "Gateway", "", "Secret", namespace, name)


#: ROUTE_PROTOCOLS names every route kind.
RULES = {"Gateway": check_gateway, **dict.fromkeys(ROUTE_PROTOCOLS, check_route)}
