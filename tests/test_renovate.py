"""renovate.json finds every image pin and every Python pin of the repository (its regexes applied here, in Python).

Renovate only proposes updates for what its managers extract, so a pin no manager matches would silently age. The
pins are collected independently of renovate.json: the image defaults of the typed config (walked through the
pydantic models), every image key of the Pulumi project and stack files, the Dockerfiles' FROM lines, the reuse
examples' image literals and the requirements files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from program.config import StackConfig
from tools.harness import PROJECT_DIR

CONFIG = json.loads((PROJECT_DIR / "renovate.json").read_text())
DIGEST = "sha256:" + "ab" * 32


def _file_pattern(pattern: str) -> re.Pattern[str]:
    """A managerFilePatterns entry: `/regex/` is a regex on the repository-relative path."""
    assert pattern.startswith("/"), pattern
    assert pattern.endswith("/"), pattern
    return re.compile(pattern[1:-1])


def _python_regex(pattern: str) -> re.Pattern[str]:
    """Renovate's JavaScript named groups `(?<name>...)` in Python's spelling."""
    return re.compile(pattern.replace("(?<", "(?P<"))


def _handles(patterns: list[str], relative: str) -> bool:
    return any(_file_pattern(p).search(relative) for p in patterns)


def _regex_managers(relative: str) -> list[dict[str, Any]]:
    return [m for m in CONFIG["customManagers"] if _handles(m["managerFilePatterns"], relative)]


def _extracted(relative: str) -> set[tuple[str, str, str | None]]:
    """(depName, currentValue, currentDigest) of every match of the regex managers that handle this file."""
    text = (PROJECT_DIR / relative).read_text()
    found = set()
    for manager in _regex_managers(relative):
        assert manager["datasourceTemplate"] == "docker"
        for pattern in manager["matchStrings"]:
            for match in _python_regex(pattern).finditer(text):
                found.add((match["depName"], match["currentValue"], match["currentDigest"]))
    return found


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
    assert _split(default) in _extracted("components/settings.py"), f"{key}={default} is not matched"


def test_the_settings_manager_finds_nothing_but_image_defaults() -> None:
    """A false match would have Renovate 'update' something that is not an image."""
    defaults = {_split(default) for _, default in IMAGE_DEFAULTS}
    assert _extracted("components/settings.py") == defaults


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


def test_digest_pins_are_extracted_with_their_digest() -> None:
    for manager in CONFIG["customManagers"]:
        for pattern in manager["matchStrings"]:
            quote = '"' if pattern.startswith('"') else ""
            match = _python_regex(pattern).search(f"x = {quote}ghcr.io/juanfont/headscale:0.29.2@{DIGEST}{quote}\n")
            assert match is not None
            assert (match["depName"], match["currentValue"], match["currentDigest"]) == (
                "ghcr.io/juanfont/headscale",
                "0.29.2",
                DIGEST,
            )
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
            assert not line or line.startswith("-r ") or re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==\S+", line), (
                f"{name}: {line!r} is not an exact pin Renovate can bump"
            )
    assert set(CONFIG["enabledManagers"]) == {"custom.regex", "dockerfile", "pip_requirements"}


def test_generated_and_test_files_are_left_alone() -> None:
    assert {"rendered/**", "tests/**"} <= set(CONFIG["ignorePaths"])
