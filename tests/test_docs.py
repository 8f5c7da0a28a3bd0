"""The documentation a user reads: a short README, every page reachable from it, every link resolving, nothing
outside the repository, every stack output listed, and the first-deployment page's commands walked offline."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from headscale_ha.components.release import VERSION
from headscale_ha.program.config import StackConfig
from headscale_ha.program.config_problems import SECRET_KEYS
from tests.models.engine.lifecycle import IDENTITY, Lab
from tools.harness import PROJECT_DIR

README = PROJECT_DIR / "README.md"
DOCS = PROJECT_DIR / "docs"
INSTALLATION = DOCS / "installation.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```sh\n(.*?)```", re.DOTALL)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [link for link in LINK.findall(text) if not link.startswith(("http://", "https://", "mailto:"))]


def test_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to docs/"


def test_every_link_resolves_to_a_file_and_an_anchor() -> None:
    broken = []
    for page in _pages():
        for link in _links(page):
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{page.relative_to(PROJECT_DIR)}: {link} (no such file)")
            elif anchor and path.is_file() and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(PROJECT_DIR)}: {link} (no such heading)")
    assert broken == []


def test_every_page_is_reachable_from_the_readme() -> None:
    reached, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for link in _links(page):
            target = (page.parent / link.partition("#")[0]).resolve()
            if target.is_dir():
                todo += sorted(target.glob("*.md"))
            elif target.suffix == ".md" and target.exists():
                todo.append(target)
    unreached = [str(p.relative_to(PROJECT_DIR)) for p in _pages() if p.resolve() not in reached]
    assert unreached == []


def test_the_changelog_names_the_release_the_stacks_report() -> None:
    first = re.search(r"^## (\S+) — (\d{4}-\d{2}-\d{2})$", (PROJECT_DIR / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert first is not None, "CHANGELOG.md has no '## <version> — <date>' entry"
    assert first.group(1) == VERSION
    assert "Apache License" in (PROJECT_DIR / "LICENSE").read_text().split("\n", 3)[1]


def test_nothing_a_user_reads_points_outside_the_repository() -> None:
    outside = [str(p.relative_to(PROJECT_DIR)) for p in _pages() if "../shared" in p.read_text()]
    assert outside == []


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = Lab(api=True)
    lab.first_deployment()
    yield lab
    lab.close()


def test_the_readme_lists_every_stack_output(lab: Lab) -> None:
    listed = set(re.findall(r"^\| `([^`]+)`", README.read_text().split("## Stack outputs", 1)[1], re.MULTILINE))
    listed |= {
        name
        for cell in re.findall(r"^\| (`[^|]+`) \|", README.read_text(), re.MULTILINE)
        for name in re.findall(r"`([^`]+)`", cell)
    }
    outputs = set()
    for stack in ("hydra", "cosmos"):
        outputs |= set(lab.world.stacks[f"organization/headscale-ha/{stack}"].outputs)
    outputs |= {"nextSteps", "kubeconfig"}  # without bootstrapApiKey / with kubeconfig set
    assert outputs - listed == set()
    assert lab.world.stacks["organization/headscale-ha/hydra"].outputs["release"] == VERSION


# ------------------------------------------------------------------------------------------------ first deployment


def _commands() -> list[list[str]]:
    lines = []
    for block in FENCE.findall(INSTALLATION.read_text()):
        lines += [line for line in block.splitlines() if line.strip()]
    return [shlex.split(line.split(" < ", 1)[0], comments=True) for line in lines]


def _config_keys() -> set[str]:
    return {field.alias or name for name, field in StackConfig.model_fields.items()}


def test_every_documented_command_names_what_exists() -> None:
    """Each `pulumi config set` names a real key (secrets with --secret), each stack and context exists, each make
    target and directory is the project's."""
    makefile = (PROJECT_DIR / "Makefile").read_text()
    stacks = {p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in PROJECT_DIR.glob("Pulumi.*.yaml")}
    stacks |= {IDENTITY}
    problems = []
    for argv in _commands():
        if argv[:3] == ["pulumi", "config", "set"]:
            key = next(arg for arg in argv[3:] if not arg.startswith("-") and arg not in stacks and "/" not in arg)
            bare = key.removeprefix("headscale-ha:")
            if bare not in _config_keys():
                problems.append(f"unknown key {key}: {shlex.join(argv)}")
            if bare in SECRET_KEYS and "--secret" not in argv:
                problems.append(f"secret {key} without --secret: {shlex.join(argv)}")
        if argv[:3] == ["pulumi", "stack", "init"] and argv[3] not in stacks:
            problems.append(f"no stack file for {argv[3]}")
        if "-s" in argv and argv[argv.index("-s") + 1].rsplit("/", 1)[1] not in stacks:
            problems.append(f"no such stack: {shlex.join(argv)}")
        if argv[0] == "make" and not re.search(rf"^{argv[1]}:", makefile, re.MULTILINE):
            problems.append(f"no make target {argv[1]}")
        if argv[0] == "cd" and argv[1] != ".." and not (PROJECT_DIR / argv[1]).is_dir():
            problems.append(f"no directory {argv[1]}")
        if argv[0] == "kubectl" and argv[1:2] == ["--context"] and argv[2] not in {"hydra", "cosmos"}:
            problems.append(f"no site context {argv[2]}")
    assert problems == []


def test_the_first_deployment_runs_as_documented_on_the_engine_model() -> None:
    """Steps 4 to 6 as written: the identity stack, then hydra, then cosmos, each `preview`/`up` on the engine
    model, each `stack output` read from what the run exported, each rollout check against the cluster."""
    lab = Lab()
    try:
        stack, ran = None, []
        for argv in _commands():
            if argv[:3] == ["pulumi", "stack", "init"]:
                stack = argv[3]
            elif argv[:2] in (["pulumi", "preview"], ["pulumi", "up"]) and "-s" not in argv:
                result = lab.run(argv[1], stack)
                assert result.error is None, f"{shlex.join(argv)} ({stack}): {result.text()}"
                ran.append((argv[1], stack))
            elif argv[:3] == ["pulumi", "stack", "output"] and "-s" not in argv:
                qualified = next(key for key in lab.world.stacks if key.endswith(f"/{stack}"))
                assert argv[3] in lab.world.stacks[qualified].outputs, f"{stack} has no output {argv[3]}"
            elif argv[0] == "kubectl" and "rollout" in argv:
                deployment = lab.world.clusters[argv[2]].find("Deployment", "headscale", argv[4])
                assert deployment is not None
                assert deployment["spec"]["replicas"] == 1
        assert ran == [("up", IDENTITY), ("preview", "hydra"), ("up", "hydra"), ("up", "cosmos")]
    finally:
        lab.close()
