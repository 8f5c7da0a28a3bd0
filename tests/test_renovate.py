"""renovate.json finds every image pin and every Python pin of the repository, and updates the Headscale release
as one (its managers and rules applied here as Renovate applies them: tests/models/renovate/renovate.py).

Renovate only proposes updates for what its managers extract, so a pin no manager matches would silently age. The
pins are collected independently of renovate.json: the image defaults of the typed config (walked through the
pydantic models), every image key of the Pulumi project and stack files, the Dockerfiles' FROM lines, the reuse
examples' image literals and the requirements files.

The Headscale version and image tag must agree (the config refuses a mismatch): one Renovate update changes both,
proven by applying it to a copy of the project and planning the stacks; and it stays within the supported minors.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from headscale_ha.components.settings import PROJECT, SUPPORTED_HEADSCALE_MINORS
from headscale_ha.program.config import StackConfig
from tests.models.renovate import renovate
from tests.models.renovate.renovate import UnmodelledError, python_regex, slash_regex
from tools import real_tools
from tools.harness import PROJECT_DIR, ProgramRun
from tools.plan import IDENTITY_DIR, plan_all, plan_stack

CONFIG = renovate.load(PROJECT_DIR / "renovate.json")
DIGEST = "sha256:" + "ab" * 32
NEWER_DIGEST = "sha256:" + "cd" * 32
HEADSCALE = "ghcr.io/juanfont/headscale"
RELEASE = "headscale-release"


def _handles(patterns: list[str], relative: str) -> bool:
    """A built-in manager's managerFilePatterns (``/regex/``, searched in the repository-relative path)."""
    compiled = [slash_regex(p) for p in patterns]
    assert all(c is not None for c in compiled), patterns
    return any(c.search(relative) for c in compiled if c is not None)


def _repository_files() -> dict[str, str]:
    """Relative path → text of every file a regex manager handles (dot directories skipped, ignorePaths obeyed)."""
    found = {}
    for root, dirs, names in os.walk(PROJECT_DIR):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for name in names:
            relative = str((Path(root) / name).relative_to(PROJECT_DIR))
            if renovate.managers_for(CONFIG, relative):
                found[relative] = (PROJECT_DIR / relative).read_text()
    return found


FILES = _repository_files()


def _extracted(relative: str) -> set[tuple[str, str, str | None]]:
    """(depName, currentValue, currentDigest) of every dependency Renovate keeps (enabled) in this file."""
    text = (PROJECT_DIR / relative).read_text()
    deps = renovate.extract_all(CONFIG, {relative: text})
    assert all(d.fields["datasource"] == "docker" for d in deps)
    return {
        (d.name, d.fields["currentValue"], d.fields.get("currentDigest")) for d in deps if renovate.enabled(CONFIG, d)
    }


#: The settings package's modules, relative to the project (the image defaults live in several of them).
SETTINGS_FILES = sorted(str(p.relative_to(PROJECT_DIR)) for p in (PROJECT_DIR / "components" / "settings").glob("*.py"))


def _extracted_settings() -> set[tuple[str, str, str | None]]:
    return set().union(*(_extracted(relative) for relative in SETTINGS_FILES))


def _split(reference: str) -> tuple[str, str, str | None]:
    name, _, digest = reference.partition("@")
    repository, _, tag = name.rpartition(":")
    return repository, tag, digest or None


def _image_defaults(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, default) of every image field with a default, through nested config sections."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for candidate in candidates:
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                yield from _image_defaults(candidate, f"{path}{name}.")
        if name.endswith("image") and isinstance(field.default, str):
            yield f"{path}{name}", field.default


def _yaml_images(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and str(key).lower().endswith("image"):
                yield f"{path}{key}", value
            else:
                yield from _yaml_images(value, f"{path}{key}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _yaml_images(value, f"{path}{index}.")


IMAGE_DEFAULTS = sorted(set(_image_defaults(StackConfig)))
PULUMI_FILES = sorted(p.name for p in PROJECT_DIR.glob("Pulumi*.yaml"))
EXAMPLE_FILES = sorted(str(p.relative_to(PROJECT_DIR)) for p in (PROJECT_DIR / "examples").rglob("*.py"))
IMAGE_LITERAL = re.compile(
    r"[\"']((?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?/[a-z0-9._/-]+:[A-Za-z0-9_][\w.+-]*(?:@sha256:[a-f0-9]{64})?)[\"']"
)


def test_the_config_has_image_defaults_to_find() -> None:
    keys = {key for key, _ in IMAGE_DEFAULTS}
    # The sections whose images the stacks deploy without the stack files naming them.
    assert {"headplane.image", "gateway.routers.image", "gateway.services.coredns_image"} <= keys
    assert "gateway.services.socat_image" in keys
    assert any(key.endswith("litestream.image") for key in keys)
    assert any("postgres" in key for key in keys)


@pytest.mark.parametrize(("key", "default"), IMAGE_DEFAULTS, ids=[key for key, _ in IMAGE_DEFAULTS])
def test_every_config_image_default_is_found(key: str, default: str) -> None:
    assert _split(default) in _extracted_settings(), f"{key}={default} is not matched"


def test_the_settings_manager_finds_nothing_but_image_defaults() -> None:
    """A false match would have Renovate 'update' something that is not an image."""
    defaults = {_split(default) for _, default in IMAGE_DEFAULTS}
    assert _extracted_settings() == defaults


@pytest.mark.parametrize("name", PULUMI_FILES)
def test_every_image_of_the_project_and_stack_files_is_found(name: str) -> None:
    images = list(_yaml_images(yaml.safe_load((PROJECT_DIR / name).read_text())))
    assert name != "Pulumi.yaml" or images, "the project file pins images"
    extracted = _extracted(name)
    for key, image in images:
        assert _split(image) in extracted, f"{name}: {key}={image} is not matched"


@pytest.mark.parametrize("relative", EXAMPLE_FILES)
def test_every_image_of_the_reuse_examples_is_found(relative: str) -> None:
    extracted = _extracted(relative)
    for image in IMAGE_LITERAL.findall((PROJECT_DIR / relative).read_text()):
        assert _split(image) in extracted, f"{relative}: {image} is not matched"


def _image_managers() -> list[dict[str, Any]]:
    return [m for m in CONFIG["customManagers"] if m.get("depTypeTemplate") == "image"]


def test_digest_pins_are_extracted_with_their_digest() -> None:
    assert len(_image_managers()) == 2
    for manager in _image_managers():
        for pattern in manager["matchStrings"]:
            quote = '"' if pattern.startswith('"') else ""
            match = python_regex(pattern).search(f"x = {quote}{HEADSCALE}:0.29.2@{DIGEST}{quote}\n")
            assert match is not None
            assert (match["depName"], match["currentValue"], match["currentDigest"]) == (HEADSCALE, "0.29.2", DIGEST)
        assert "{{#if newDigest}}@{{newDigest}}{{/if}}" in manager["autoReplaceStringTemplate"]
    assert {"matchDatasources": ["docker"], "pinDigests": True}.items() <= CONFIG["packageRules"][0].items()


def test_dockerfiles_and_requirements_are_handled_by_the_builtin_managers() -> None:
    dockerfiles = [str(p.relative_to(PROJECT_DIR)) for p in (PROJECT_DIR / "images").rglob("Dockerfile")]
    assert dockerfiles
    for relative in dockerfiles:
        assert _handles(CONFIG["dockerfile"]["managerFilePatterns"], relative), relative
    requirements = sorted(p.name for p in PROJECT_DIR.glob("requirements*.txt"))
    assert "requirements.txt" in requirements
    assert "requirements-dev.txt" in requirements
    for name in requirements:
        assert _handles(CONFIG["pip_requirements"]["managerFilePatterns"], name), name
        for line in (PROJECT_DIR / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if name == "requirements.txt" and line == "-e .":
                continue  # the checkout itself (the package), not a dependency: nothing to bump
            assert not line or line.startswith("-r ") or re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==\S+", line), (
                f"{name}: {line!r} is not an exact pin Renovate can bump"
            )
    assert set(CONFIG["enabledManagers"]) == {"custom.regex", "dockerfile", "pip_requirements"}


def test_generated_and_test_files_are_left_alone() -> None:
    assert {"rendered/**", "tests/**"} <= set(CONFIG["ignorePaths"])


# ------------------------------------------------------------------------------------------- the Headscale release


def _next(version: str, part: int) -> str:
    """``version`` with its ``part``-th number (0 major, 1 minor, 2 patch) raised and the later ones zeroed."""
    numbers = [int(n) for n in version.split(".")]
    numbers[part] += 1
    return ".".join(str(n) for n in [*numbers[: part + 1], *[0] * (len(numbers) - part - 1)])


def _release(relative: str, text: str) -> tuple[str, str] | None:
    """(version, image) of the Headscale a file pins, read as its program reads it; None when it pins none."""
    if relative.endswith(".py"):
        calls = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)]
        for call in calls:
            if getattr(call.func, "id", None) == "HeadscaleSettings":  # HeadscaleServerArgs(settings=...)
                keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in {"version", "image"}}
                return keywords["version"], keywords["image"]
        return None
    document = yaml.safe_load(text)
    config = document.get("config") or {}
    section = config.get("headscale", {}).get("value") or config.get(f"{PROJECT}:headscale")
    if section is None:  # a Pulumi YAML program: the component package's HeadscaleServer (examples/yaml)
        servers = [
            resource["properties"]["headscale"]
            for resource in (document.get("resources") or {}).values()
            if resource.get("type") == "headscale-ha:index:HeadscaleServer"
        ]
        section = servers[0] if servers else None
    return None if section is None else (str(section["version"]), section["image"])


CURRENT = _release("Pulumi.yaml", FILES["Pulumi.yaml"])[0]
PATCH = _next(CURRENT, 2)
PINNING = {relative for relative, text in FILES.items() if f"{HEADSCALE}:" in text}


def test_the_files_that_pin_headscale_are_the_project_file_and_the_examples() -> None:
    assert {"Pulumi.yaml", "examples/reuse/__main__.py", "examples/yaml/Pulumi.yaml"} <= PINNING
    for relative in PINNING:
        release = _release(relative, FILES[relative])
        assert release is not None, relative
        assert release == (CURRENT, f"{HEADSCALE}:{CURRENT}"), f"{relative}: {release}"


@pytest.mark.parametrize("relative", sorted(PINNING))
def test_the_headscale_release_is_one_dependency_of_its_version_and_image(relative: str) -> None:
    """Renovate keeps one Headscale dependency per file, the release manager's; the image managers' match of the
    same image is disabled, or two updates of one text would race and leave the version behind."""
    deps = [d for d in renovate.extract_all(CONFIG, {relative: FILES[relative]}) if d.name == HEADSCALE]
    kept = [d for d in deps if renovate.enabled(CONFIG, d)]
    assert [d.fields["depType"] for d in kept] == [RELEASE], f"{relative}: {[dict(d.fields) for d in kept]}"
    assert {d.fields["depType"] for d in deps if d not in kept} == {"image"}
    (release,) = kept
    assert release.fields["currentValue"] == CURRENT


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    assert before.count("\n") == after.count("\n")
    return [(b, a) for b, a in zip(before.splitlines(), after.splitlines(), strict=True) if b != a]


def test_one_update_rewrites_the_version_and_the_image_tag_together() -> None:
    """Renovate's branch for the next patch (digest pinned, as pinDigests has it): in every file that pins
    Headscale, exactly the version line and the image line change, to the same release."""
    updated = renovate.branch(CONFIG, FILES, HEADSCALE, PATCH, DIGEST)
    assert {relative for relative in FILES if updated[relative] != FILES[relative]} == PINNING
    for relative in PINNING:
        assert _release(relative, updated[relative]) == (PATCH, f"{HEADSCALE}:{PATCH}@{DIGEST}"), relative
        assert len(_changed_lines(FILES[relative], updated[relative])) == 2, relative


def test_digest_pins_and_later_releases_rewrite_both_lines_too() -> None:
    """Renovate's first run pins the digest of the current tag (the version stays); the next release replaces
    tag and digest, the version with them."""
    pinned = renovate.branch(CONFIG, FILES, HEADSCALE, CURRENT, DIGEST)
    later = renovate.branch(CONFIG, pinned, HEADSCALE, PATCH, NEWER_DIGEST)
    for relative in PINNING:
        assert _release(relative, pinned[relative]) == (CURRENT, f"{HEADSCALE}:{CURRENT}@{DIGEST}"), relative
        assert _release(relative, later[relative]) == (PATCH, f"{HEADSCALE}:{PATCH}@{NEWER_DIGEST}"), relative
        assert len(_changed_lines(FILES[relative], later[relative])) == 2, relative


def _headscale_images(run: ProgramRun) -> set[str]:
    return {
        str(container["image"])
        for obj in run.kubernetes_objects()
        if obj.get("kind") == "Deployment"
        for container in obj["spec"]["template"]["spec"]["containers"]
        if container["name"] == "headscale"
    }


def _gate_versions(run: ProgramRun) -> set[str]:
    return {str(r.inputs["version"]) for r in run.resources if r.type.endswith(":VersionGate")}


def test_the_updated_project_and_example_plan_cleanly_with_the_new_release(tmp_path: Path) -> None:
    """The branch's files planned offline: every stack plans (the config would refuse a version that disagrees
    with the tag), and runs the new release under its new version."""
    updated = renovate.branch(CONFIG, FILES, HEADSCALE, PATCH, DIGEST)
    project = tmp_path / "project"
    project.mkdir()
    for path in PROJECT_DIR.glob("Pulumi*.yaml"):
        (project / path.name).write_text(updated[path.name])
    planned = list(plan_all(project_dir=project, identity_dir=IDENTITY_DIR))
    assert [p.error for p in planned] == [None] * len(planned)
    sites = [p.run for p in planned if p.project == PROJECT and p.run is not None]
    assert {run.stack for run in sites} == {"hydra", "cosmos"}
    for run in sites:
        assert _headscale_images(run) == {f"{HEADSCALE}:{PATCH}@{DIGEST}"}, run.stack
        assert _gate_versions(run) == {PATCH}, run.stack
    example = tmp_path / "reuse"
    shutil.copytree(PROJECT_DIR / "examples" / "reuse", example, ignore=shutil.ignore_patterns("__pycache__"))
    (example / "__main__.py").write_text(updated["examples/reuse/__main__.py"])
    run = plan_stack("dev", project_dir=example, program=example / "__main__.py")
    assert _headscale_images(run) == {f"{HEADSCALE}:{PATCH}@{DIGEST}"}
    assert _gate_versions(run) == {PATCH}


def _supported_rule() -> dict[str, Any]:
    (rule,) = [r for r in CONFIG["packageRules"] if "headscale-release" in r.get("matchDepTypes", [])]
    return rule


def test_the_allowed_headscale_versions_are_the_supported_minors() -> None:
    """The rule is SUPPORTED_HEADSCALE_MINORS written as Renovate's allowedVersions regex: widen both together."""
    rule = _supported_rule()
    assert rule["matchDepTypes"] == [RELEASE]
    minors = "|".join(re.escape(minor) for minor in SUPPORTED_HEADSCALE_MINORS)
    assert rule["allowedVersions"] == f"/^({minors})\\.[0-9]+$/"
    assert "SUPPORTED_HEADSCALE_MINORS" in rule["description"]
    assert all(minor in rule["description"] for minor in SUPPORTED_HEADSCALE_MINORS)


def test_renovate_proposes_no_headscale_outside_the_supported_minors() -> None:
    (dep,) = [
        d
        for d in renovate.extract_all(CONFIG, {"Pulumi.yaml": FILES["Pulumi.yaml"]})
        if d.fields.get("depType") == RELEASE
    ]
    by_number = sorted(SUPPORTED_HEADSCALE_MINORS, key=lambda minor: [int(n) for n in minor.split(".")])
    lowest, highest = by_number[0], by_number[-1]
    for minor in SUPPORTED_HEADSCALE_MINORS:
        assert renovate.allowed(CONFIG, dep, f"{minor}.0")
        assert renovate.allowed(CONFIG, dep, f"{minor}.17")
    major, low = lowest.split(".")
    older = f"{major}.{int(low) - 1}.9"
    for version in [_next(f"{highest}.0", 1), older, _next(f"{highest}.0", 0), f"{highest}.3-rc.1"]:
        assert not renovate.allowed(CONFIG, dep, version), version
    next_minor = _next(f"{highest}.0", 1)
    assert renovate.branch(CONFIG, FILES, HEADSCALE, next_minor, DIGEST) == FILES, f"{next_minor} is held back"


# ------------------------------------------------------------------------------------------- the model itself


def test_the_model_reads_renovates_regexes_as_javascript_does() -> None:
    named = python_regex(r"(?<depName>[a-z/]+):(?<currentValue>\d+)$")
    assert named.fullmatch("a/b:12") is not None
    assert named.search("a/b:12\n") is None, "JavaScript's $ (no m flag) is the end of the text"
    assert python_regex(r"\d").search("\u0663") is None, "RE2's \\d is ASCII"
    for unsupported in [r"a(?=b)", r"a(?!b)", r"(?<=a)b", r"(?<!a)b", r"(a)\1", r"(?<x>a)\k<x>"]:
        with pytest.raises(UnmodelledError):
            python_regex(unsupported)


def test_the_model_renders_templates_as_handlebars_does() -> None:
    fields = {"depName": "a/b", "newValue": "1=2", "indentation": "  "}
    assert renovate.render("{{depName}}:{{newValue}}", fields) == "a/b:1&#x3D;2", "{{x}} is HTML-escaped"
    assert renovate.render("{{{newValue}}}{{#if newDigest}}@x{{else}}!{{/if}}", fields, ["newDigest"]) == "1=2!"
    with pytest.raises(UnmodelledError):
        renovate.render("{{newVersion}}", fields)
    with pytest.raises(UnmodelledError):
        renovate.render("a\n{{#if depName}}\nb\n{{/if}}\n", fields)


def test_every_real_tool_pin_is_found_once_by_its_actor() -> None:
    """Each built actor of tools/real_tools.json is a Go dependency named after the actor; an actor the proxy cannot
    serve ("none") has nothing to update, and the previous Headscale release is moved by hand."""
    relative = "tools/real_tools.json"
    deps = renovate.extract_all(CONFIG, {relative: (PROJECT_DIR / relative).read_text()})
    found = {(d.name, d.fields["packageName"], d.fields["currentValue"], d.fields["datasource"]) for d in deps}
    actors = real_tools.load_actors()
    pins = {(a.name, a.module, a.version, "go") for a in actors if a.available and a.name != "headscale-previous"}
    assert found == pins
    assert "headscale-previous" in {a.name for a in actors}  # kept by hand one minor behind
    (node,) = [d for d in deps if d.name == "tailscale-node"]
    assert renovate.allowed(CONFIG, node, "v1.103.1")
    assert not renovate.allowed(CONFIG, node, "v1.104.0"), "tailscale.com v1.104 needs a newer Go than the machines"
