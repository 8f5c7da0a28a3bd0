"""Pure renderer for the Litestream 0.5.17 config of one SQLite application, plus the restore script text.

The config replicates ONE database to a ``type: file`` replica on the NFS backup volume. Keys are the ones
Litestream 0.5.17 actually parses (checked against the real binary, see tests/components/test_litestream_config.py):

- top level ``snapshot.retention``: how long snapshots (and the compacted LTX files they supersede) are kept.
  0.5 has no per-replica ``retention``/``snapshot-interval`` (0.3 had them; 0.5.17 silently ignores them), so
  retention is emitted globally; ``snapshot.interval`` keeps Litestream's default (24h).
- ``dbs[].path`` and ``dbs[].replica`` (singular; ``replicas`` is the deprecated list form) with ``type: file``,
  ``path`` and ``sync-interval``.

No Pulumi import and no I/O except :func:`restore_script`, which reads packaged data (components/shell_scripts.py).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re

from headscale_ha.components.shell_scripts import packaged_script
from headscale_ha.policy.values import go_duration_ns

__all__ = [
    "RESTORE_SCRIPT_NAME",
    "duration_seconds",
    "parse_go_duration",
    "render_litestream_config",
    "restore_script",
]

RESTORE_SCRIPT_NAME = "litestream-restore.sh"


def parse_go_duration(value: str, *, argument: str) -> int:
    """Return a Go duration string in nanoseconds; Litestream unmarshals these with time.ParseDuration.

    Raises ValueError naming ``argument`` when the text is not a Go duration (e.g. "1d", "5", "") or one too long
    for Go to hold, so a bad knob fails at plan time instead of crash-looping the sidecar.
    """
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return go_duration_ns(value)
    raise ValueError(f"{argument}: {value!r} is not a Go duration (examples: '1s', '500ms', '1h30m', '72h')")


def duration_seconds(value: str, *, argument: str) -> int:
    """A positive Go duration in whole seconds, at least 1 (what the scripts take)."""
    return max(1, parse_go_duration(value, argument=argument) // 1_000_000_000)


def _positive_duration(value: str, *, argument: str) -> str:
    if parse_go_duration(value, argument=argument) <= 0:
        raise ValueError(f"{argument}: {value!r} must be a positive duration (Litestream rejects zero or less)")
    return value


def _absolute_path(value: str, *, argument: str) -> str:
    """Accept only normalised absolute POSIX paths that survive YAML quoting and Litestream's env expansion."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"{argument}: {value!r} must be an absolute path")
    if value == "/" or posixpath.normpath(value) != value:
        raise ValueError(f"{argument}: {value!r} must be a normalised absolute path to a file or directory")
    if "$" in value:
        # Litestream expands $VAR / ${VAR} in the config text before parsing it.
        raise ValueError(f"{argument}: {value!r} must not contain '$' (Litestream expands environment variables)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError(f"{argument}: {value!r} must not contain control characters")
    return value


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar, so any path is emitted unambiguously.
    return json.dumps(value, ensure_ascii=False)


def render_litestream_config(
    *, db_path: str, replica_path: str, sync_interval: str, retention: str, metrics_addr: str | None = None
) -> str:
    """Render litestream.yml (0.5.17) replicating ``db_path`` to a file replica at ``replica_path``.

    Deterministic: the same arguments always give byte-identical text, so the ConfigMap only changes (and the pod
    only rolls) when a knob does.
    """
    db_path = _absolute_path(db_path, argument="db_path")
    replica_path = _absolute_path(replica_path, argument="replica_path")
    if replica_path == db_path or db_path.startswith(replica_path + "/") or replica_path.startswith(db_path + "/"):
        raise ValueError(f"replica_path: {replica_path!r} must be separate from db_path {db_path!r}")
    sync_interval = _positive_duration(sync_interval, argument="sync_interval")
    retention = _positive_duration(retention, argument="retention")
    # Litestream serves Prometheus metrics at http://<addr>/metrics when the top-level `addr` is set.
    metrics = f"addr: {_yaml_str(_listen_addr(metrics_addr))}\n" if metrics_addr is not None else ""
    return (
        "# Rendered by headscale-ha (components/litestream_config.py) for Litestream 0.5.17. Do not edit.\n"
        f"{metrics}"
        "snapshot:\n"
        f"  retention: {retention}\n"
        "dbs:\n"
        f"  - path: {_yaml_str(db_path)}\n"
        "    replica:\n"
        "      type: file\n"
        f"      path: {_yaml_str(replica_path)}\n"
        f"      sync-interval: {sync_interval}\n"
    )


def _listen_addr(addr: str) -> str:
    """A host:port Go's net.Listen takes (the host may be empty or an IPv4 address), port 1-65535."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not re.fullmatch(r"[0-9.]*", host):
        raise ValueError(f"metrics_addr: {addr!r} must be <IPv4 or empty>:<port 1-65535>, e.g. ':9091'")
    return addr


def restore_script() -> str:
    """Text of the restore-before-serve init container script."""
    return packaged_script(RESTORE_SCRIPT_NAME)
