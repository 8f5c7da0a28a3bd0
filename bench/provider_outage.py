"""How long `pulumi preview` and `pulumi up` of hydra take when its Headscale cannot answer (engine model).

The lost active of the failover runbook: the provider's URL refuses connections, drops packets (a full accept
queue), or accepts and never answers. Every address is on 127.0.0.1. Prints one line per case: the seconds, whether
the run failed, and what the Headscale resources did (`same` with warnings is the expected answer: a preview
against a lost server reports no change and says why). Figures are printed, never asserted.
"""

from __future__ import annotations

import time

from tests.models.engine.lifecycle import Lab
from tests.models.engine.state import RunResult
from tests.models.headscale import Unreachable

API_URL = "headscale-ha:headscaleApiUrl"
MODES = ("refuse", "blackhole", "silent")


def _line(kind: str, case: str, seconds: float, result: RunResult) -> str:
    api = [s for s in result.steps if s.type.startswith("pulumi-python:dynamic/headscale:")]
    ops = sorted({s.op for s in api})
    warnings = sum("could not answer" in w or "not sent" in w for w in result.warnings)
    failed = "failed" if result.error else "ok"
    return f"{kind:7} {case:10} {seconds:6.2f} s  {failed:6} api steps {len(api)} {ops} warnings {warnings}"


def main() -> int:
    lab = Lab(api=True)
    try:
        lab.first_deployment()
        for kind in ("preview", "up"):
            started = time.monotonic()
            result = lab.run(kind, "hydra")
            print(_line(kind, "reachable", time.monotonic() - started, result))
            for mode in MODES:
                with Unreachable(mode) as down:
                    started = time.monotonic()
                    result = lab.run(kind, "hydra", overrides={API_URL: down.url})
                    print(_line(kind, mode, time.monotonic() - started, result))
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
