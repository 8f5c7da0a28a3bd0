"""Fixtures shared by the component tests of one building block across files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.witness_lab import Witness, running_witness


@pytest.fixture(scope="module")
def witness() -> Iterator[Witness]:
    """A real kube-apiserver as the witness of the lease tests: one per test module."""
    with running_witness() as started:
        yield started
