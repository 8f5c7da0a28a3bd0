"""Ingress: every backend names a Service and one of its ports, and every TLS entry a Secret holding a key pair."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import as_dict, as_list, nested
from tools.wiring.model import Holder
from tools.wiring.rules.services import service_backend
from tools.wiring.vocabulary import TLS_KEYS


def check_ingress(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    spec = as_dict(obj.get("spec"))
    backends = [("spec.defaultBackend", spec.get("defaultBackend"))]
    for i, rule in enumerate(as_list(spec.get("rules"))):
        for j, http_path in enumerate(as_list(nested(rule, "http", "paths"))):
            backends.append((f"spec.rules[{i}].http.paths[{j}].backend", nested(http_path, "backend")))
    for path, backend in backends:
        service = nested(backend, "service")
        if isinstance(service, dict):
            port = nested(service, "port", "number") or nested(service, "port", "name")
            consequence = "the ingress controller would answer requests for this path with 503"
            service_backend(checker, holder, f"{path}.service", service.get("name"), None, port, consequence)
    for k, tls in enumerate(as_list(spec.get("tls"))):
        checker.ref(
            holder,
            f"spec.tls[{k}].secretName",
            "Secret",
            nested(tls, "secretName"),
            consequence="the ingress controller would serve its default (untrusted) certificate",
            keys=[(key, f"spec.tls[{k}].secretName") for key in TLS_KEYS],
            key_consequence="the ingress controller cannot load the certificate",
        )


RULES = {"Ingress": check_ingress}
