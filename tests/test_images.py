"""Project-built images pin their base image and every package they install."""

from __future__ import annotations

import re

from headscale_ha.guardrails.images import image_problem
from tools.harness import PROJECT_DIR

DOCKERFILES = sorted((PROJECT_DIR / "images").glob("*/Dockerfile"))


def test_there_is_a_migration_image() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["migrate"]


def test_base_images_are_pinned() -> None:
    for dockerfile in DOCKERFILES:
        bases = re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), flags=re.MULTILINE)
        assert bases, dockerfile
        for base in bases:
            assert image_problem(base) is None, f"{dockerfile}: {base}: {image_problem(base)}"


def test_installed_packages_are_pinned() -> None:
    for dockerfile in DOCKERFILES:
        text = dockerfile.read_text().replace("\\\n", " ")
        for command in re.findall(r"apt-get install ([^&\n]+)", text):
            packages = [word for word in command.split() if not word.startswith("-")]
            assert packages, dockerfile
            assert all("=" in package for package in packages), f"{dockerfile}: unpinned in {packages}"


def test_the_image_carries_the_code_the_job_runs() -> None:
    text = (PROJECT_DIR / "images" / "migrate" / "Dockerfile").read_text()
    assert "COPY migration /app/migration" in text
    assert "USER 65532:65532" in text
    assert (PROJECT_DIR / "migration" / "__main__.py").is_file()
