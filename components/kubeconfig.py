"""Reading a kubeconfig, which is a secret: every problem names the field, never a value or the document."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml


def load_kubeconfig(kubeconfig: str) -> dict[str, Any]:
    """Parse and shape-check a kubeconfig without ever echoing its content (it holds credentials)."""
    if not isinstance(kubeconfig, str):
        raise ValueError(f"kubeconfig: must be YAML text, got {type(kubeconfig).__name__}")
    try:
        document = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        # 'from None': PyYAML's message quotes the offending text, which may be a key or a token.
        raise ValueError(f"kubeconfig: not valid YAML{where}") from None
    if not isinstance(document, dict):
        raise ValueError("kubeconfig: the document must be a mapping")
    if document.get("apiVersion") != "v1":
        raise ValueError("apiVersion: must be 'v1'")
    if document.get("kind") != "Config":
        raise ValueError("kind: must be 'Config'")
    clusters = document.get("clusters")
    if not isinstance(clusters, list) or not clusters:
        raise ValueError("clusters: must be a non-empty list")
    for index, entry in enumerate(clusters):
        where = f"clusters[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be a mapping with 'name' and 'cluster'")
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ValueError(f"{where}.name: must be a non-empty string")
        if not isinstance(entry.get("cluster"), dict):
            raise ValueError(f"{where}.cluster: must be a mapping")
    return document


def server_parts(server: object, *, where: str) -> tuple[str, str]:
    """Host and path of an API server URL; the message names the field, never the URL (it may carry userinfo)."""
    if not isinstance(server, str):
        raise ValueError(f"{where}: must be an https URL string")
    try:
        parts = urlsplit(server)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        raise ValueError(f"{where}: must be an https URL such as https://api.example.com:6443") from None
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"{where}: must be an https URL such as https://api.example.com:6443")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ValueError(f"{where}: must not carry credentials, a query or a fragment")
    return parts.hostname, parts.path.rstrip("/")
