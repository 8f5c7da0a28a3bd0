"""How much the program's own work costs on top of Pulumi's per-resource cost.

For each stack: the median wall time of ``make plan STACK=<stack>`` against the SDK floor, a program that
registers the same number of bare ConfigMaps under the same mocks harness and writes nothing, started the
same way (a fresh interpreter) and loading the same provider SDK modules the program loads (importing
``pulumi_kubernetes.apps.v1`` is Pulumi's cost, not the program's). The ratio plan / floor is the figure;
the goal is at most 1.5. A second table times both in-process (no interpreter start-up), which shows the
program's own share more sharply.

Usage: ``python -m bench.plan_time [--runs N]`` (``make bench``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.harness import run_program
from tools.plan import offline_stack_outputs, plan_stack, write_rendered
from tools.stack_files import list_stacks

ROOT = Path(__file__).resolve().parent.parent

FLOOR_PROGRAM = """\
import importlib

import pulumi_kubernetes as k8s

for module in {modules!r}:
    importlib.import_module(module)

for index in range({count}):
    k8s.core.v1.ConfigMap(f"floor-{{index}}", metadata={{"name": f"floor-{{index}}"}})
"""

SDK_PACKAGES = ("pulumi_kubernetes.", "pulumi_random")

FLOOR_RUNNER = """\
from pathlib import Path
from tools.harness import run_program
run_program(project="floor", stack="floor", config={{}}, program=Path({program!r}))
"""


def _median_seconds(action: Callable[[], None], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _run(command: list[str]) -> None:
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per measurement (median reported)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    rows = []
    references = offline_stack_outputs()  # the identity stack's and the active site's planned outputs
    for stack in list_stacks(ROOT):
        count = len(plan_stack(stack, stack_outputs=references).resources)
        sdk_modules = sorted(m for m in sys.modules if m.startswith(SDK_PACKAGES) and m.count(".") <= 2)
        program = scratch / f"floor_{stack}.py"
        program.write_text(FLOOR_PROGRAM.format(count=count, modules=sdk_modules))
        runner = FLOOR_RUNNER.format(program=str(program))
        _run(["make", "-s", "plan", f"STACK={stack}"])  # warm-up (and venv bootstrap if needed)
        plan = _median_seconds(lambda s=stack: _run(["make", "-s", "plan", f"STACK={s}"]), args.runs)
        floor = _median_seconds(lambda r=runner: _run([sys.executable, "-c", r]), args.runs)

        def in_process_plan(s: str = stack) -> None:
            write_rendered(plan_stack(s, stack_outputs=references), scratch / "rendered" / s)

        def in_process_floor(p: Path = program) -> None:
            run_program(project="floor", stack="floor", config={}, program=p)

        in_plan = _median_seconds(in_process_plan, args.runs)
        in_floor = _median_seconds(in_process_floor, args.runs)
        rows.append((stack, count, plan, floor, in_plan, in_floor))

    print(f"plan time vs SDK floor (median of {args.runs} runs; goal: ratio <= 1.5)")
    print(
        f"{'stack':<10}{'resources':>10}{'make plan':>12}{'floor':>10}{'ratio':>8}"
        f"{'in-proc plan':>15}{'in-proc floor':>15}{'ratio':>8}"
    )
    for stack, count, plan, floor, in_plan, in_floor in rows:
        print(
            f"{stack:<10}{count:>10}{plan:>11.3f}s{floor:>9.3f}s{plan / floor:>8.2f}"
            f"{in_plan * 1000:>13.1f}ms{in_floor * 1000:>13.1f}ms{in_plan / in_floor:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
