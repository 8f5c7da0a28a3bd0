"""How long the witness lease takes to change hands, and by how much the old holder's fence comes first.

components/scripts/witness-lease.sh on a real kube-apiserver (tests/support/witness_lab.py), at the timing proposed
as automatic failover's default (printed first). Two scenarios, each over ``--trials`` runs (default 10):

- ``lost``: the holder's site is gone at once (its renewer killed, its link refusing). Printed: the time from the
  loss to the other site holding the Lease.
- ``partitioned``: the holder is cut from the witness only (packets dropped); it fences by itself. Printed: the time
  from the cut to the other site holding, and the margin between the holder's fence and the take (never negative:
  that would be two writers).

Figures are the script's own monotonic timestamps (/proc/uptime) and the bench's, on one machine. This is the lease's
share of a takeover only: the restore, Headscale's start and the DNS TTL come after it.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.witness_lab import Witness, new_site, running_witness

#: The proposed default: fence 12 s after the last accepted renewal, take over 20 + 2 s after the last change seen.
TIMING = {"LEASE_SECONDS": "20", "SKEW_SECONDS": "2", "RENEW_SECONDS": "3", "FENCE_AFTER_SECONDS": "12",
          "RETRY_SECONDS": "1"}  # fmt: skip


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _trial(witness: Witness, root: Path, scenario: str) -> dict[str, float]:
    witness.forget()
    holder, taker = (new_site(witness, root / name, name, TIMING) for name in ("hydra", "cosmos"))
    try:
        assert holder.run("acquire") == 0, holder.events()
        holding = holder.start("hold")
        gate = taker.start("acquire")
        time.sleep(float(TIMING["RENEW_SECONDS"]) * 2)  # the gate has seen a renewal or two
        lost_at = _uptime()
        if scenario == "lost":
            holding.send_signal(signal.SIGKILL)
            holder.proxy.cut("refuse")
        else:
            holder.proxy.cut("blackhole")
        assert gate.wait(timeout=120) == 0, taker.events()
        taken = taker.first("acquired")
        figures = {"takeover": taken - lost_at}
        if scenario == "partitioned":
            assert holding.wait(timeout=60) == 5, holder.events()
            figures["margin"] = taken - holder.first("fenced")
        return figures
    finally:
        holder.close()
        taker.close()


def _summary(name: str, values: list[float]) -> str:
    return f"{name}: median {statistics.median(values):.1f} s, min {min(values):.1f} s, max {max(values):.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args(argv)
    print("timing: " + ", ".join(f"{key}={value}" for key, value in TIMING.items()))
    with running_witness() as witness, tempfile.TemporaryDirectory() as scratch:
        for scenario in ("lost", "partitioned"):
            runs = [_trial(witness, Path(scratch) / f"{scenario}-{n}", scenario) for n in range(args.trials)]
            print(f"{scenario} ({args.trials} trials)")
            print("  " + _summary("loss to the other holding", [run["takeover"] for run in runs]))
            if scenario == "partitioned":
                margins = [run["margin"] for run in runs]
                print("  " + _summary("the holder's fence before the take", margins))
                print(f"  two holders at once: {sum(margin <= 0 for margin in margins)} of {args.trials}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
