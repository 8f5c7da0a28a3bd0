"""What pyright (`make lint`) is allowed to overlook, and nothing more (docs/contributing.md, "Types").

pyright checks the whole repository in its standard mode. Two waivers remain, each a list this test holds fixed,
so that neither can grow without a change to this file:

- the tests run with a named set of rules off (a test may index an optional it has just asserted, for instance);
- the modules that build Kubernetes objects may pass a plain dict where pulumi-kubernetes expects its ``*ArgsDict``:
  their dicts spell fields as the Kubernetes API does (``containerPort``), which the SDK accepts and sends as
  written, while its ``*ArgsDict`` types spell them in Python (``container_port``). Typing them means respelling
  every field of every builder and of the tests that compare whole objects; until then the waiver stays in the
  modules that construct resources from such dicts, and no other.
"""

from __future__ import annotations

import re
import tomllib

from tests.support.source_files import tracked_python
from tools.harness import PROJECT_DIR

#: The line a Kubernetes builder carries to waive pyright's argument check (and nothing else).
ARGUMENT_WAIVER = "# pyright: reportArgumentType=false"
KUBERNETES_BUILDERS = {
    "components/gateway_services.py",
    "components/monitoring.py",
    "components/network_policy.py",
    "components/rehearsal.py",
    "components/sqlite_to_postgres.py",
    "components/subnet_routers.py",
    "components/workload.py",
}
#: The rules the tests' execution environment turns off; every other rule of standard mode holds there too.
RULES_OFF_IN_TESTS = {
    "reportArgumentType",
    "reportOptionalMemberAccess",
    "reportOptionalSubscript",
    "reportOptionalCall",
    "reportPossiblyUnboundVariable",
    "reportAttributeAccessIssue",
    "reportOperatorIssue",
    "reportCallIssue",
    "reportOptionalOperand",
    "reportReturnType",
    "reportTypedDictNotRequiredAccess",
    "reportIncompatibleMethodOverride",
    "reportIncompatibleVariableOverride",
    "reportGeneralTypeIssues",
}
#: A file-level comment that changes what pyright checks: a mode, or a rule set by name.
_FILE_LEVEL = re.compile(r"^#\s*pyright:\s*(?!ignore\b)(.+)$", re.MULTILINE)
#: A construction of a pulumi-kubernetes resource (``k8s.apps.v1.Deployment(``).
_RESOURCE = re.compile(r"\bk8s\.[a-z0-9_]+\.v[0-9a-z]+\.[A-Z]\w*\(")


def _pyright_config() -> dict:
    return tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["pyright"]


def test_the_whole_repository_is_checked_in_standard_mode() -> None:
    config = _pyright_config()
    assert config["typeCheckingMode"] == "standard"
    assert [env["root"] for env in config.get("executionEnvironments", [])] == ["tests"]


def test_the_tests_turn_off_only_the_named_rules() -> None:
    (tests,) = _pyright_config()["executionEnvironments"]
    off = {rule for rule, level in tests.items() if rule.startswith("report") and level == "none"}
    assert off == RULES_OFF_IN_TESTS
    assert {key for key in tests if not key.startswith("report")} == {"root", "extraPaths"}


def test_only_the_kubernetes_builders_waive_a_rule_and_only_the_argument_rule() -> None:
    waivers = {}
    for path in tracked_python():
        found = _FILE_LEVEL.findall(path.read_text())
        if found:
            waivers[str(path.relative_to(PROJECT_DIR))] = found
    assert waivers == {path: [ARGUMENT_WAIVER.removeprefix("# pyright: ")] for path in KUBERNETES_BUILDERS}


def test_every_module_with_the_waiver_builds_kubernetes_resources() -> None:
    without = [path for path in sorted(KUBERNETES_BUILDERS) if not _RESOURCE.search((PROJECT_DIR / path).read_text())]
    assert without == []
