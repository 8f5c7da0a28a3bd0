"""What pyright (`make lint`) is allowed to overlook, and nothing more (docs/contributing.md, "Types").

pyright checks the whole repository in its standard mode. One waiver remains, a list this test holds fixed, so that
it cannot grow without a change to this file: the tests run with a named set of rules off (a test may index an
optional it has just asserted, for instance). No source module waives a rule: the Kubernetes objects are built as
pulumi-kubernetes' typed ``*ArgsDict`` where they are built, and where the API's spelling must survive
(components/api_spelling.py) it is translated through the SDK's own tables.
"""

from __future__ import annotations

import re
import tomllib

from tests.support.source_files import tracked_python
from tools.harness import PROJECT_DIR

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


def test_no_source_module_waives_a_rule() -> None:
    waivers = {}
    for path in tracked_python():
        found = _FILE_LEVEL.findall(path.read_text())
        if found:
            waivers[str(path.relative_to(PROJECT_DIR))] = found
    assert waivers == {}
