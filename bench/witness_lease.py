"""How long a lost or cut-off holder of the witness lease takes to be replaced by the other site's writer, whether
two writers ever overlapped, and whether the failsafe keeps a holder that lost only the witness.

Whole sites on a real kube-apiserver (tests/support/witness_lab.py): each site a pod as the kubelet runs it around a
stand-in writer that logs every write with its fencing counter (tests/support/witness_pod.py), the failsafe on, at
the timing proposed as automatic failover's default (printed first). Four scenarios, each over ``--trials`` runs
(default 10):

- ``lost``: the holder's site is gone at once (its pod killed, every link of it refusing). Printed: the time from
  the loss to the other site's first write.
- ``partitioned``: the holder is cut from the witness and from the other site (packets dropped); it fences by
  itself. Printed: the time from the cut to the other site's first write, and the gap between the holder's last
  write and that one (never negative: that would be two writers).
- ``witness-only``: the holder is cut from the witness, the other site is not; ``witness-down``: both are. For
  LEASE + SKEW + FENCE_AFTER seconds (longer than the Lease alone would let the holder serve or the other wait),
  then mended. Printed: how often the writer changed (0 is right).

In ``lost`` and ``partitioned`` each site also runs Headplane's pod (``follow``/``watch``, with a link of its own to
the witness, lost or cut with the site), writing to a log of its own. Printed: the time from the loss to the other
site's Headplane's first write, which waits a whole lease after its site's take, and whether two Headplanes ever
wrote at once.

Every trial's write log is judged for two writers (tests/support/witness_pod.py `two_writers`). Figures are the
monotonic clock (/proc/uptime) of the writers and the bench, on one machine. This is the lease's share of a
takeover, with a writer that starts at once: the restore, Headscale's start and the DNS TTL come on top of it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from headscale_ha.components.settings import FailoverSettings
from headscale_ha.components.witness_lease import GATE_RETRY_SECONDS
from tests.support.witness_lab import LeaseSite, Witness, new_site, running_witness, with_failsafe
from tests.support.witness_pod import LeasePod, first_write, two_writers, uptime, writes

#: The proposed default: fence 12 s after the last accepted renewal, take over 20 + 2 s after the last change seen;
#: the writers get the 6 s left to stop (STOP_GRACE_SECONDS of the pod model: 0.5 s).
#: The program's default timing (tailnet.failover) and the gate's retry, as the serving pod renders them (STOP and
#: its grace are each stand-in pod's own).
_DEFAULT = FailoverSettings().script_environment()
TIMING = {key: _DEFAULT[key] for key in ("LEASE_SECONDS", "SKEW_SECONDS", "RENEW_SECONDS", "FENCE_AFTER_SECONDS")}
TIMING["RETRY_SECONDS"] = str(GATE_RETRY_SECONDS)
SCENARIOS = ("lost", "partitioned", "witness-only", "witness-down")
#: How long the failsafe scenarios keep the witness away: past both the holder's deadline and the other's wait.
OUTAGE_SECONDS = sum(float(TIMING[key]) for key in ("LEASE_SECONDS", "SKEW_SECONDS", "FENCE_AFTER_SECONDS"))


def cut(holder: LeaseSite, taker: LeaseSite, scenario: str) -> None:
    mode = "refuse" if scenario == "lost" else "blackhole"
    holder.proxy.cut(mode)
    if scenario in ("lost", "partitioned"):
        for link in holder.links.values():
            link.cut(mode)
    if scenario == "witness-down":
        taker.proxy.cut(mode)


def _trial(witness: Witness, root: Path, scenario: str) -> dict[str, float]:
    witness.release()
    sites = {name: new_site(witness, root / name, name, TIMING) for name in ("hydra", "cosmos")}
    with_failsafe(witness, sites)
    log, ui_log = root / "writes.log", root / "headplane.log"
    pods = {name: LeasePod(site, log) for name, site in sites.items()}
    followed = scenario in ("lost", "partitioned")
    followers = (
        {name: new_site(witness, root / f"{name}-headplane", name, TIMING) for name in sites} if followed else {}
    )
    ui = {name: LeasePod(site, ui_log, follows=True) for name, site in followers.items()}
    try:
        pods["hydra"].start()
        first_write(log, "hydra", timeout=30)
        pods["cosmos"].start()
        for pod in ui.values():
            pod.start()
        if followed:
            first_write(ui_log, "hydra", timeout=60)
        time.sleep(float(TIMING["RENEW_SECONDS"]) * 2)  # the gate has seen a renewal or two
        lost_at = uptime()
        if scenario == "lost":
            pods["hydra"].lose()
            ui["hydra"].lose()
        cut(sites["hydra"], sites["cosmos"], scenario)
        if followed:
            followers["hydra"].proxy.cut("refuse" if scenario == "lost" else "blackhole")
        if scenario in ("witness-only", "witness-down"):
            time.sleep(OUTAGE_SECONDS)
            figures = {"changes": float(len({write.fencing for write in writes(log)}) - 1)}
        else:
            first = first_write(log, "cosmos", timeout=120)
            last_old = max(write.at for write in writes(log) if write.site == "hydra")
            figures = {"takeover": first - lost_at, "gap": first - last_old}
            figures["headplane"] = first_write(ui_log, "cosmos", timeout=120) - lost_at
    finally:
        for pod in [*pods.values(), *ui.values()]:
            pod.stop()
        for site in [*sites.values(), *followers.values()]:
            site.close()
    figures["two_writers"] = float(bool(two_writers(log)))
    figures["two_headplanes"] = float(bool(two_writers(ui_log))) if followed else 0.0
    return figures


def _summary(name: str, values: list[float]) -> str:
    return f"{name}: median {statistics.median(values):.1f} s, min {min(values):.1f} s, max {max(values):.1f} s"


def _report(scenario: str, runs: list[dict[str, float]]) -> None:
    print(f"{scenario} ({len(runs)} trials)")
    if scenario in ("witness-only", "witness-down"):
        print(f"  away {OUTAGE_SECONDS:.0f} s: the writer changed in {sum(run['changes'] > 0 for run in runs)} of "
              f"{len(runs)}")  # fmt: skip
    else:
        print("  " + _summary("loss to the other site's first write", [run["takeover"] for run in runs]))
        print("  " + _summary("the old writer's last write before it", [run["gap"] for run in runs]))
        print("  " + _summary("loss to the other site's Headplane", [run["headplane"] for run in runs]))
        print(f"  two Headplanes at once: {sum(run['two_headplanes'] > 0 for run in runs):.0f} of {len(runs)}")
    print(f"  two writers at once: {sum(run['two_writers'] > 0 for run in runs):.0f} of {len(runs)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="default: all")
    args = parser.parse_args(argv)
    print("timing: " + ", ".join(f"{key}={value}" for key, value in TIMING.items()) + "; failsafe on")
    with running_witness() as witness, tempfile.TemporaryDirectory() as scratch:
        for scenario in args.scenario or SCENARIOS:
            runs = [_trial(witness, Path(scratch) / f"{scenario}-{n}", scenario) for n in range(args.trials)]
            _report(scenario, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
