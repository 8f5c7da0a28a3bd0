"""A real PostgreSQL server for the migration tests: started once per session, stopped at the end.

Skipped, with the reason, only when the PostgreSQL server binaries, psql or pgloader are absent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from migration.psql import PsqlConnection
from offline.pg_lab import PgServer, missing_tools

_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    reason = missing_tools()
    if reason is not None:
        pytest.skip(f"real-tool migration tests need PostgreSQL 15 and pgloader: {reason}")
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
