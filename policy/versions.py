"""The Headscale minors the policy model speaks, and how a release number maps to one.

Every rule of the model is per minor (``"0.28"``, ``"0.29"``); this is the one place that says which minors exist.
It depends on nothing (the bottom of ``headscale_ha.policy``, beside :mod:`.problems`).
"""

from __future__ import annotations

import re

__all__ = ["SUPPORTED_VERSIONS", "headscale_minor"]

#: Headscale minors this model speaks.
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.28", "0.29")

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def headscale_minor(version: str) -> str:
    """``"0.29.2"``, ``"v0.29.2"`` or ``"0.29"`` → ``"0.29"``; anything this model does not speak is refused."""
    match = _VERSION_RE.match(version) if isinstance(version, str) else None
    minor = f"{int(match[1])}.{int(match[2])}" if match else None
    if minor not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported Headscale version {version!r}: the policy model speaks {SUPPORTED_VERSIONS}")
    return minor
