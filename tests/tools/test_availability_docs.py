"""docs/availability/<stack>.md are generated from the planned stacks and kept current; writing is idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from headscale_ha.program.availability import availability_output
from tools import availability_docs
from tools.availability_docs import DOCS_DIR, documents, report_of, stale, write
from tools.harness import PROJECT_DIR
from tools.plan import plan_all
from tools.stack_files import list_stacks


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    """Every site stack's page, planned once for the module."""
    return documents()


def test_the_committed_pages_are_current(pages: dict[str, str]) -> None:
    problems = {str(path.relative_to(PROJECT_DIR)): why for path, why in stale(DOCS_DIR, pages).items()}
    assert problems == {}, f"docs/availability is stale ({problems}): run `make docs`"


def test_there_is_one_page_per_site_stack(pages: dict[str, str]) -> None:
    assert sorted(pages) == list_stacks(PROJECT_DIR) == ["cosmos", "hydra"]
    for stack, page in pages.items():
        assert page.startswith(f"# Availability of `{stack}`\n")
        assert "make docs" in page.rstrip().splitlines()[-1]


def test_the_page_is_the_whole_report_where_the_output_is_its_summary() -> None:
    (planned,) = [p for p in plan_all(stacks=["hydra"]) if p.stack == "hydra"]
    exports = planned.run.exports
    report = report_of("hydra", exports)
    assert exports["availability"] == availability_output("hydra", report)
    assert set(report) - set(exports["availability"]) >= {"redundancy", "maintenance", "limits", "improvements"}


def test_write_is_idempotent_and_removes_the_pages_of_stacks_that_are_gone(tmp_path: Path) -> None:
    directory = tmp_path / "availability"
    first = {"alpha": "# alpha\n", "beta": "# beta\n"}
    assert sorted(p.name for p in write(directory, first)) == ["alpha.md", "beta.md"]
    assert write(directory, first) == []
    mtime = (directory / "alpha.md").stat().st_mtime_ns
    (directory / "notes.txt").write_text("not a page\n")
    changed = write(directory, {"alpha": "# alpha\n", "gamma": "# gamma\n"})
    assert sorted(p.name for p in changed) == ["beta.md", "gamma.md"]
    assert sorted(p.name for p in directory.iterdir()) == ["alpha.md", "gamma.md", "notes.txt"]
    assert (directory / "alpha.md").stat().st_mtime_ns == mtime, "an unchanged page is not rewritten"
    assert stale(directory, {"alpha": "# changed\n", "gamma": "# gamma\n"}) == {directory / "alpha.md": "differs"}


def test_the_check_fails_on_a_stale_page_and_the_write_fixes_it(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(availability_docs, "DOCS_DIR", tmp_path)
    monkeypatch.setattr(availability_docs, "documents", lambda: {"alpha": "# alpha\n"})
    (tmp_path / "old.md").write_text("# old\n")
    assert availability_docs.main([]) == 1
    out = capsys.readouterr()
    assert "alpha.md: missing" in out.out
    assert "old.md: no such stack" in out.out
    assert "run `make docs`" in out.err
    assert availability_docs.main(["--write"]) == 0
    assert availability_docs.main([]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["alpha.md"]
    assert availability_docs.main(["--bogus"]) == 2
