"""How pytest-xdist spreads the suite over the cores (`make test`, `make test-all`; see the Makefile).

With `--dist loadfile` a worker takes a whole test file at a time, so a module's fixtures are set up once. This
plugin adds one rule: the real-actor tier (tests/real, the runbooks with the real Pulumi CLI on the lab) is one
unit, not one per file, so its modules run one after another on one worker. Each starts a lab of real control
planes, and two labs on two cores would stretch the timings its failover tests measure. The workers also collect
that tier first, so that with `--no-loadscope-reorder` (`make test-all`) one worker starts the longest unit at once
and the others share every other file beside it.

pytest-xdist's own grouping (`--dist loadgroup`) cannot do this here: it renames the tests' node ids, which
pytest 9.2 no longer lets a plugin do, so the marks it reads are ignored.
"""

from __future__ import annotations

import os

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

#: The real-actor tier (`make test-real`); `make test` leaves it out.
REAL_TIER = "tests/real/"


def in_real_tier(nodeid: str) -> bool:
    return nodeid.startswith(REAL_TIER)


class RealTierAsOneFile(LoadFileScheduling):
    """`--dist loadfile`, with the whole real-actor tier as a single unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        return REAL_TIER if in_real_tier(nodeid) else super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    """The scheduler of `--dist loadfile`; any other mode keeps pytest-xdist's own (None)."""
    return RealTierAsOneFile(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a worker, the real-actor tier first (the sort is stable: each part keeps its order); a run without
    workers keeps pytest's order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: not in_real_tier(item.nodeid))
