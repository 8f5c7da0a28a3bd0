"""A real PostgreSQL server for the migration tests: started once per session, stopped at the end.

Every test that uses it (directly or through ``new_db``) is a real-tool test: marked ``real_tool`` for PostgreSQL,
psql and pgloader, so it is skipped naming the Debian packages when one is absent (tests/real_tools.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from migration.psql import PsqlConnection
from tests.real_tools import require
from tests.support.pg_lab import PgServer

PG_TOOLS = ("postgres", "psql", "pgloader")

_names = itertools.count(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_tool(*PG_TOOLS))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    require(*PG_TOOLS)
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def new_db(pg_server: PgServer) -> Iterator[Callable[..., PsqlConnection]]:
    """``new_db(version)``: a fresh database holding Headscale's empty schema (``new_db()``: no schema at all)."""
    created: list[str] = []

    def make(version: str | None = None, *, template: str | None = None) -> PsqlConnection:
        name = f"t{next(_names)}"
        created.append(name)
        if version is not None:
            return pg_server.headscale_database(name, version)
        return pg_server.create_database(name, template=template)

    yield make
    for name in created:
        pg_server.admin().query(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
