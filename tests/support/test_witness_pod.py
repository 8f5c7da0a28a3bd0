"""The write-log judge of the whole-site lease scenarios (tests/support/witness_pod.py) on logs made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.witness_pod import two_writers


def log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "writes.log"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_one_writer_after_another_is_one_writer_at_a_time(tmp_path: Path) -> None:
    written = log(tmp_path, "hydra 1 10.00", "hydra 1 10.50", "cosmos 2 11.00", "cosmos 2 12.00", "hydra 3 13.0")
    assert two_writers(written) == []


def test_no_log_is_no_writer(tmp_path: Path) -> None:
    assert two_writers(tmp_path / "absent.log") == []


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (("hydra 1 10", "cosmos 2 10.5", "hydra 1 11"), "counter 2 wrote at 10.5 before counter 1's last write 11.0"),
        (("hydra 1 10.0", "cosmos 1 10.5"), "counter 1 written by ['cosmos', 'hydra']"),
        (("cosmos 2 10.0", "hydra 1 11.0"), "counter 2 wrote at 10.0 before counter 1's last write 11.0"),
        (("hydra 1 10.0", "cosmos 2 10.0"), "counter 2 wrote at 10.0 before counter 1's last write 10.0"),
    ],
)
def test_overlapping_or_shared_counters_are_named(tmp_path: Path, lines: tuple[str, ...], problem: str) -> None:
    assert problem in two_writers(log(tmp_path, *lines))
