"""How long `make promote SITE=cosmos` takes on the engine model, with hydra reachable and with hydra lost.

The command (tools/runbook.py) runs against the recording `pulumi`/`kubectl` of tests/models/cli/cli_model.py: every
`pulumi up` is a real run of the program (preview, then update) on the engine model, with the Headscale provider
running for real against the fake Headscale; the fence's pod check waits on the model's clock for the rendered
pod's termination grace period. Printed: the command's wall time, the waits it made, the pulumi runs.

What it cannot include: a real API server's latency per step and the rollout the `pulumi up` of cosmos awaits
(image pull, restore, start): the `recovery` output adds those from its own inputs. With ``--record`` the
figures go to bench/measured/promotion.json, which the `recovery` output's clusterLoss row reads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from tests.models.cli.cli_model import CommandLine
from tests.models.engine.lifecycle import Lab
from tools.runbook import main as runbook

ROOT = Path(__file__).resolve().parent.parent

MEASURED = ROOT / "bench" / "measured" / "promotion.json"
CASES = {"reachable": (), "lost": ("--lost", "hydra", "--confirm-lost", "hydra")}


class CaseFigures(TypedDict):
    """One case's promotion: the commands' wall time, the waits they made, how many ran, the stacks brought up."""

    commandSeconds: float
    waitSeconds: float
    commands: int
    pulumiUps: list[str]


def _case(name: str) -> CaseFigures:
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        for path in ROOT.glob("Pulumi*.yaml"):
            shutil.copy(path, project / path.name)
        lab = Lab(api=True, project_dir=project)
        try:
            lab.first_deployment()
            if name == "lost":
                lab.world.lost.add("hydra")
            cli = CommandLine(lab)
            lines: list[str] = []
            started = time.monotonic()
            code = runbook(
                ["promote", "cosmos", *CASES[name], "--yes"],
                runner=cli,
                project_dir=project,
                out=lines.append,
                sleep=cli.sleep,
            )
            wall = time.monotonic() - started
        finally:
            lab.close()
    if code != 0:
        raise SystemExit(f"{name}: the promotion failed:\n" + "\n".join(lines + cli.printed))
    ups = [stack for kind, stack, _ in cli.runs if kind == "up"]
    return {
        "commandSeconds": round(wall, 1),
        "waitSeconds": cli.clock,
        "commands": len([c for c in cli.calls if c[1:3] != ("stack", "output")]),
        "pulumiUps": ups,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help=f"write {MEASURED.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    figures: dict[str, CaseFigures | dict[str, Any]] = {name: _case(name) for name in CASES}
    for name, case in figures.items():
        print(
            f"promote cosmos, hydra {name:9}: {case['commandSeconds']:6.1f} s of commands + "
            f"{case['waitSeconds']:5.1f} s waited; {case['commands']} commands, "
            f"pulumi up of {', '.join(case['pulumiUps'])}"
        )
    if args.record:
        kept = json.loads(MEASURED.read_text()).get("lost", {}) if MEASURED.exists() else {}
        if "method" in kept:  # measured on real actors by bench/real_runs.py: the model does not overwrite it
            figures["lost"] = kept
        record = {
            "measuredOn": datetime.now(UTC).date().isoformat(),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
            "method": "tools/runbook.py promote on the engine model (tests/models/cli/cli_model.py); every pulumi up "
            "a real program run with the Headscale provider against the fake Headscale",
            **figures,
        }
        MEASURED.write_text(json.dumps(record, indent=2) + "\n")
        print(f"recorded {MEASURED.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
