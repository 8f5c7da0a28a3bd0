"""A tiny dynamic provider for tests/models/engine/test_engine.py, in an importable module so that dill pickles it by
reference and the real dynamic provider host (started with the checkout on PYTHONPATH) can load it.

Every call appends ``<method> <size>`` to the file named by the ``log`` input, so a test sees which calls the host
received; ``size`` changes replace; a non-empty ``explode`` makes create raise with that text.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CheckResult, CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


def _log(props: dict[str, Any], method: str) -> None:
    with Path(props["log"]).open("a") as handle:
        handle.write(f"{method} {props.get('size')}\n")


class SampleProvider(ResourceProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        _log(news, "check")
        return CheckResult(news, [])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        _log(news, "diff")
        replaces = ["size"] if olds.get("size") != news.get("size") else []
        return DiffResult(changes=olds.get("size") != news.get("size"), replaces=replaces)

    def create(self, props: dict[str, Any]) -> CreateResult:
        _log(props, "create")
        if props.get("explode"):
            raise RuntimeError(f"create exploded: {props['explode']}")
        return CreateResult(id_=f"sample-{uuid.uuid4().hex[:8]}", outs={**props, "serial": uuid.uuid4().hex})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        _log(news, "update")
        return UpdateResult(outs={**news, "serial": olds.get("serial")})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        _log(props, "delete")


class Sample(Resource):
    serial: pulumi.Output[str]

    def __init__(self, name: str, *, log: str, size: str, explode: str = "") -> None:
        props = {"log": log, "size": size, "explode": explode, "serial": None}
        super().__init__(SampleProvider(), name, props)
