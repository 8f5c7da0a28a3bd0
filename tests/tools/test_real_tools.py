"""tools/real_tools.py: the pins decide the cache directory, the recipes read their sources right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import real_tools


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test has a cache of its own: the machine's real one holds actors a test would otherwise find and reuse
    (a kwok built for the real pins is "cached", not "not served")."""
    monkeypatch.setenv(real_tools.CACHE_ENV, str(tmp_path / "cache"))


def _pins(tmp_path: Path, **changes: str) -> Path:
    data = json.loads(real_tools.PINS_FILE.read_text())
    for key, value in changes.items():
        actor, field = key.split("__")
        data["actors"][actor.replace("_", "-")][field] = value
    path = tmp_path / "pins.json"
    path.write_text(json.dumps(data))
    return path


def test_a_new_version_moves_the_cache_and_prose_does_not(tmp_path: Path) -> None:
    base = real_tools.pins_key(_pins(tmp_path))
    assert real_tools.pins_key(_pins(tmp_path, headscale__why="reworded")) == base
    assert real_tools.pins_key(_pins(tmp_path, headscale__version="v0.29.3")) != base
    assert real_tools.pins_key(_pins(tmp_path, kwok__package="sigs.k8s.io/kwok/cmd/kwokctl")) != base


def test_every_pinned_actor_has_a_recipe_or_says_why_it_has_none() -> None:
    for actor in real_tools.load_actors():
        if actor.available:
            assert actor.name in real_tools.RECIPES, actor.name
        else:
            assert actor.pin.get("why"), f"{actor.name} is not available and names no fallback"


def test_the_cache_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(real_tools.CACHE_ENV, str(tmp_path))
    assert real_tools.bin_dir() == tmp_path / real_tools.pins_key() / "bin"


def test_staging_modules_are_replaced_by_their_published_release(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text(
        "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n"
    )
    assert real_tools.staging_replaces(tmp_path, "v0.37.2") == {"k8s.io/api": "v0.37.2", "k8s.io/client-go": "v0.37.2"}


def test_a_cached_actor_is_not_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    actor = next(actor for actor in real_tools.load_actors() if actor.name == "kwok")
    record = {
        "actor": "kwok",
        "module": actor.module,
        "version": actor.version,
        "status": "built",
        "binaries": [],
        "seconds": 1,
    }
    real_tools.stamp_path(tmp_path, actor).write_text(json.dumps(record))

    def refuse(*_: object) -> bool:
        raise AssertionError("probed the proxy for a cached actor")

    monkeypatch.setattr(real_tools, "served", refuse)
    assert real_tools.build_actor(actor, tmp_path, tmp_path)["status"] == "cached (built in 1 s)"


def test_an_unserved_version_is_reported_not_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    actor = next(actor for actor in real_tools.load_actors() if actor.name == "kwok")
    monkeypatch.setattr(real_tools, "served", lambda module, version: False)
    record = real_tools.build_actor(actor, tmp_path, tmp_path)
    assert record["status"] == f"not served: {actor.module}@{actor.version}"
    assert "not served" in real_tools.report(record, tmp_path)


def _built(directory: Path, actor: real_tools.Actor, **fields: object) -> Path:
    """A cache directory of another set of pins where ``actor`` was built (one binary), with ``fields`` overridden."""
    out = directory / "bin"
    out.mkdir(parents=True)
    (out / "kwok").write_text("#!/bin/sh\n")
    record = {"actor": actor.name, "binaries": ["kwok"], "seconds": 86.8, "build": actor.build_fields()}
    record |= {"recipe": real_tools.RECIPE_VERSION, **fields}
    real_tools.stamp_path(out, actor).write_text(json.dumps(record))
    return out


def test_a_bump_of_another_pin_reuses_what_was_built_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(real_tools.CACHE_ENV, str(tmp_path))
    actor = next(actor for actor in real_tools.load_actors() if actor.name == "kwok")
    _built(tmp_path / "older-pins", actor)
    out = tmp_path / "new-pins" / "bin"
    out.mkdir(parents=True)
    monkeypatch.setattr(real_tools, "served", lambda *_: pytest.fail("probed the proxy for a reusable actor"))
    assert real_tools.build_actor(actor, out, tmp_path)["status"] == "cached (built in 86.8 s)"
    assert (out / "kwok").read_text() == "#!/bin/sh\n"


@pytest.mark.parametrize(
    "fields", [{"recipe": "0"}, {"build": {"module": "sigs.k8s.io/kwok", "version": "v0.6.0"}}, {"binaries": ["gone"]}]
)
def test_what_was_built_otherwise_is_not_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict) -> None:
    monkeypatch.setenv(real_tools.CACHE_ENV, str(tmp_path))
    actor = next(actor for actor in real_tools.load_actors() if actor.name == "kwok")
    _built(tmp_path / "older-pins", actor, **fields)
    out = tmp_path / "new-pins" / "bin"
    out.mkdir(parents=True)
    assert not real_tools.reuse_built(actor, out)
    assert not real_tools.stamp_path(out, actor).exists()


def test_a_command_of_ours_moves_the_cache_when_its_source_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "node"
    source.mkdir()
    (source / "main.go").write_text("package main\n")
    monkeypatch.setattr(real_tools, "REPO", tmp_path)
    actor = real_tools.Actor("tailscale-node", {"module": "tailscale.com", "version": "v1.102.5", "source": "node"})
    before = actor.build_fields()
    (source / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert actor.build_fields() != before
