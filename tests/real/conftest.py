"""Fixtures of the real-actor tests: the lab of two real clusters, once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kube_lab import KubeLab, running_lab


@pytest.fixture(scope="module")
def lab() -> Iterator[KubeLab]:
    """hydra and cosmos, real control planes, for the module's runbook."""
    with running_lab() as started:
        yield started


@pytest.fixture(scope="module")
def site_lab() -> Iterator[KubeLab]:
    """hydra and cosmos with Headscale's pods left for the lab's own kubelet (tests/support/lab_sites.py)."""
    with running_lab(held_apps=("headscale",)) as started:
        yield started
