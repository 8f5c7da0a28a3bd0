"""The components' typed pieces (pulumi-kubernetes' ``*ArgsDict``, spelled in Python) as the API receives them
(spelled as the API does): what a test compares with a whole expected object, or sends to a real API server.
The translation is the SDK's own (components/api_spelling.py, held to the SDK's serializer by its test)."""

from __future__ import annotations

from typing import Any

from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    EnvVarArgs,
    PodSecurityContextArgs,
    PodSpecArgs,
    SecurityContextArgs,
    VolumeArgs,
    VolumeMountArgs,
)

from headscale_ha.components.api_spelling import api_spelled


def pod_spec(spec: Any) -> dict[str, Any]:
    """A pod spec as the API receives it."""
    return api_spelled(spec, PodSpecArgs)


def container(piece: Any) -> dict[str, Any]:
    """A container (or a list of them) as the API receives it."""
    return api_spelled(piece, ContainerArgs)


def volume(piece: Any) -> Any:
    """A pod volume (or a list of them) as the API receives it."""
    return api_spelled(piece, VolumeArgs)


def mount(piece: Any) -> Any:
    """A volume mount (or a list of them) as the API receives it."""
    return api_spelled(piece, VolumeMountArgs)


def env(piece: Any) -> Any:
    """An environment variable (or a list of them) as the API receives it."""
    return api_spelled(piece, EnvVarArgs)


def container_security(piece: Any) -> dict[str, Any]:
    """A container's security context as the API receives it."""
    return api_spelled(piece, SecurityContextArgs)


def pod_security(piece: Any) -> dict[str, Any]:
    """A pod's security context as the API receives it."""
    return api_spelled(piece, PodSecurityContextArgs)
