"""The suite's two tiers, and how pytest-xdist spreads them over the cores (`make test`, `make test-real`,
`make test-all`; see the Makefile).

The real-actor tier is every test that runs an actor `make real-tools` builds from source (a Kubernetes control
plane, the Pulumi CLI, Headscale, a Tailscale node): tests/real, the runbooks on the lab, and every other test
whose `real_tool` marker names such an actor (the witness lease on a real API server, the providers against a
real Headscale). The everyday tier is the rest. `--tier everyday` (`make test`) or `--tier real`
(`make test-real`) selects one; the default runs both (`make test-all`, CI).

With `--dist loadfile` a worker takes a whole test file at a time, so a module's fixtures are set up once. This
plugin adds one rule: the runbooks (tests/real, the real Pulumi CLI on the lab) are one unit, not one per file, so
their modules run one after another on one worker. Each starts a lab of real control planes, and two labs on two
cores would stretch the timings its failover tests measure. The workers also collect the runbooks first, so that
with `--no-loadscope-reorder` (`make test-all`, `make test-real`) one worker starts the longest unit at once and the
others share every other file beside it.

pytest-xdist's own grouping (`--dist loadgroup`) cannot do this here: it renames the tests' node ids, which
pytest 9.2 no longer lets a plugin do, so the marks it reads are ignored.
"""

from __future__ import annotations

import os

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

from tests.real_tools import MARKER, TOOLS

#: The runbooks on the lab: the part of the real-actor tier that runs as one unit.
REAL_TIER = "tests/real/"
TIERS = ("everyday", "real", "all")


def in_real_tier(nodeid: str) -> bool:
    return nodeid.startswith(REAL_TIER)


def runs_a_built_actor(item: pytest.Item) -> bool:
    """The test's `real_tool` marker names an actor `make real-tools` builds, or it is one of the runbooks."""
    named = (name for marker in item.iter_markers(MARKER) for name in marker.args)
    return in_real_tier(item.nodeid) or any(name in TOOLS and TOOLS[name].source == "go" for name in named)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default="all",
        help="everyday: the tests that need no actor `make real-tools` builds; real: only those; all (default): both",
    )


class RealTierAsOneFile(LoadFileScheduling):
    """`--dist loadfile`, with the whole real-actor tier as a single unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        return REAL_TIER if in_real_tier(nodeid) else super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    """The scheduler of `--dist loadfile`; any other mode keeps pytest-xdist's own (None)."""
    return RealTierAsOneFile(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier ``--tier`` names; on a worker, the runbooks first (the sort is stable: each part keeps its order),
    while a run without workers keeps pytest's order."""
    tier = config.getoption("tier")
    if tier != "all":
        wanted = tier == "real"
        deselected = [item for item in items if runs_a_built_actor(item) != wanted]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if runs_a_built_actor(item) == wanted]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: not in_real_tier(item.nodeid))
