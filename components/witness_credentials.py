"""The credentials the lease containers read, from the kubeconfigs a stack holds as secrets: the witness's (for the
Lease of ``tailnet.failover``) and, with the failsafe, each other site's (for that site's failsafe Lease).

The lease script speaks to an API server with curl, a bearer token and a CA bundle, nothing else: so a kubeconfig
is accepted only when its current context's cluster has an https ``server`` and ``certificate-authority-data``, and
its user a ``token`` (a ServiceAccount token bound to the Role of components/witness_lease.py ``lease_role``). Client
certificates, exec plugins, token files and ``tls-server-name`` cannot be carried into the pod's files and are
refused, each by name. No message quotes a value: a kubeconfig is a secret.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from headscale_ha.components.kubeconfig import load_kubeconfig, server_parts

#: What the script cannot use, and what to do instead.
_UNUSABLE_CLUSTER_KEYS = {
    "insecure-skip-tls-verify": "the token would travel to an unverified server; give certificate-authority-data",
    "tls-server-name": "curl checks the certificate against the server's own host; use a server URL whose host the "
    "certificate names",
    "proxy-url": "the lease containers connect directly",
    "certificate-authority": "a file on your machine is not in the pod; give certificate-authority-data",
}
_USER_HINT = (
    "the lease script authenticates with a bearer token only: give the user a token of a ServiceAccount bound to the "
    "lease Role (kubectl create token <account> --duration=8760h)"
)


@dataclass(frozen=True, repr=False)
class ApiCredentials:
    """One API server as the lease script reaches it (a repr that shows no value: it is logged nowhere)."""

    api_url: str
    ca_crt: str
    token: str
    namespace: str | None = None  # the current context's namespace, when it names one

    def __repr__(self) -> str:
        return "ApiCredentials(<secret>)"


def lease_credentials(kubeconfig: str, *, key: str) -> ApiCredentials:
    """The current context's server, CA and token; ``key`` (the config key the kubeconfig came from) starts every
    problem's message."""
    try:
        document = load_kubeconfig(kubeconfig)
        context, cluster, user = _current(document)
        api_url = _server(cluster)
        namespace = context.get("namespace")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ValueError("the current context's namespace: must be a namespace name when set")
        return ApiCredentials(api_url=api_url, ca_crt=_ca(cluster), token=_token(user), namespace=namespace)
    except ValueError as problem:
        raise ValueError(f"{key}: {problem}") from None


def _named(document: dict[str, Any], section: str, name: object, *, named_by: str) -> dict[str, Any]:
    entries = document.get(section)
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(section[:-1])
            if not isinstance(inner, dict):
                raise ValueError(f"{section}[{index}].{section[:-1]}: must be a mapping")
            return inner
    raise ValueError(f"{section}: no entry named as {named_by} says")


def _current(document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The current context, its cluster and its user."""
    name = document.get("current-context")
    if not isinstance(name, str) or not name:
        raise ValueError("current-context: must name the context the lease containers use")
    context = _named(document, "contexts", name, named_by="current-context")
    cluster = _named(document, "clusters", context.get("cluster"), named_by="the current context's cluster")
    return context, cluster, _named(document, "users", context.get("user"), named_by="the current context's user")


def _server(cluster: dict[str, Any]) -> str:
    for unusable, instead in _UNUSABLE_CLUSTER_KEYS.items():
        if unusable in cluster:
            raise ValueError(f"cluster.{unusable}: cannot be used by the lease containers: {instead}")
    server_parts(cluster.get("server"), where="cluster.server")
    return str(cluster["server"]).rstrip("/")


def _ca(cluster: dict[str, Any]) -> str:
    data = cluster.get("certificate-authority-data")
    if not isinstance(data, str) or not data:
        raise ValueError("cluster.certificate-authority-data: is required (the CA the server's certificate is checked "
                         "against)")  # fmt: skip
    try:
        pem = base64.b64decode(data, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("cluster.certificate-authority-data: must be base64 of a PEM bundle") from None
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError("cluster.certificate-authority-data: must be base64 of a PEM bundle of certificates")
    return pem


def _token(user: dict[str, Any]) -> str:
    token = user.get("token")
    if not isinstance(token, str) or not token.strip():
        others = sorted(set(user) - {"token"})
        found = f" (it has {', '.join(others)})" if others else ""
        raise ValueError(f"user.token: is required{found}: {_USER_HINT}")
    if any(char.isspace() for char in token.strip()) or not token.strip().isprintable():
        raise ValueError("user.token: must be one bearer token, without spaces or control characters")
    return token.strip()


def witness_secret_data(witness: ApiCredentials) -> dict[str, str]:
    """The witness Secret's keys, mounted as the lease containers' TOKEN_FILE and CA_FILE."""
    return {"token": witness.token, "ca.crt": witness.ca_crt}


def peers_secret_data(peers: dict[str, tuple[ApiCredentials, str]]) -> dict[str, str]:
    """The peers Secret's keys (``<site>.<file>``, as components/witness_lease.py ``lease_volumes`` mounts them):
    per other site, its credentials and the namespace of its failsafe Lease."""
    data: dict[str, str] = {}
    for site, (credentials, namespace) in sorted(peers.items()):
        data |= {
            f"{site}.api-url": credentials.api_url,
            f"{site}.token": credentials.token,
            f"{site}.ca.crt": credentials.ca_crt,
            f"{site}.namespace": namespace,
        }
    return data
