"""verify-full, for real: PostgreSQL 15 serving a certificate from a throwaway CA, and the migration's two clients.

psql (every check and the verification) and pgloader (the load) must reach the server only when it proves, with
the CA the Job mounts, that it is the server: no CA, another CA, or (for psql) a host name the certificate does not
name, and nothing is read or written. pgloader's `require` checks the chain against SSL_CERT_FILE only (it has no
host-name check: see PsqlConnection.pgloader_url), which is what the test pins down.
"""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from migration.errors import MigrationError, PsqlError
from migration.load import run_pgloader
from migration.psql import PsqlConnection
from tests.real_tools import require
from tests.support.pg_lab import PgServer

pytestmark = pytest.mark.real_tool("postgres", "psql", "pgloader", "openssl")


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA that signed the server certificate
    wrong_ca: Path  # a CA that did not
    server_cert: Path  # issued for DNS:localhost only
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    require("openssl")
    d = tmp_path_factory.mktemp("pki")
    for name in ("ca", "wrong"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}-ca",
                 "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
             "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "ext.cnf", "-out", "server.crt", cwd=d)  # fmt: skip
    return Pki(d / "ca.crt", d / "wrong.crt", d / "server.crt", d / "server.key")


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[PgServer]:
    require("postgres", "psql", "pgloader")
    server = PgServer.start(tls=(pki.server_cert, pki.server_key))
    try:
        server.create_database("tls")
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_default_root_cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq's fallback CA file is ~/.postgresql/root.crt: an empty HOME, so 'no CA' really means none."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)


def _target(server: PgServer, pki: Pki, *, host: str = "localhost", ca: Path | None = None) -> PsqlConnection:
    """What the Job's MIGRATION_PG_URL gives the tool: verify-full and the mounted CA file."""
    url = f"postgresql://headscale@{host}:{server.port}/tls?sslmode=verify-full"
    if ca is not None:
        url += f"&sslrootcert={ca}"
    return PsqlConnection.from_url(url, password=server.app_password)


def test_the_lab_server_serves_tls(tls_server: PgServer, pki: Pki) -> None:
    pg = _target(tls_server, pki, ca=pki.ca)
    assert pg.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == [["t"]]


@pytest.mark.parametrize(
    ("case", "phrase"),
    [
        ("no CA", "root certificate file"),
        ("wrong CA", "certificate verify failed"),
        ("name not in the certificate", "does not match host name"),
    ],
)
def test_psql_refuses_a_server_it_cannot_verify(tls_server: PgServer, pki: Pki, case: str, phrase: str) -> None:
    pg = {
        "no CA": _target(tls_server, pki),
        "wrong CA": _target(tls_server, pki, ca=pki.wrong_ca),
        "name not in the certificate": _target(tls_server, pki, host="127.0.0.1", ca=pki.ca),
    }[case]
    with pytest.raises(PsqlError, match=phrase):
        pg.query("SELECT 1")


def _source(tmp_path: Path) -> Path:
    path = tmp_path / "source.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO things VALUES (?, ?)", [(1, "a"), (2, "b")])
    return path


@pytest.fixture
def empty_target(tls_server: PgServer, pki: Pki) -> PsqlConnection:
    pg = _target(tls_server, pki, ca=pki.ca)
    pg.execute("DROP TABLE IF EXISTS things; CREATE TABLE things (id bigint PRIMARY KEY, name text);")
    return pg


def test_pgloader_loads_through_a_verified_connection(empty_target: PsqlConnection, tmp_path: Path) -> None:
    report = run_pgloader(
        _source(tmp_path), empty_target, ["things"], workdir=tmp_path / "w", expected_rows={"things": 2}
    )
    assert report.table_rows("things") == 2
    assert empty_target.query("SELECT count(*) FROM things") == [["2"]]


@pytest.mark.parametrize("ca", ["none", "wrong"])
def test_pgloader_refuses_a_server_it_cannot_verify(
    empty_target: PsqlConnection, pki: Pki, tmp_path: Path, ca: str
) -> None:
    pg = replace(empty_target, sslrootcert=None if ca == "none" else str(pki.wrong_ca))
    with pytest.raises(MigrationError, match="pgloader"):
        run_pgloader(_source(tmp_path), pg, ["things"], workdir=tmp_path / "w", expected_rows={"things": 2})
    output = (tmp_path / "w" / "pgloader-output.log").read_text()
    assert "SSL verify error" in output
    assert empty_target.query("SELECT count(*) FROM things") == [["0"]], "nothing was written"


def test_pgloader_gets_the_ca_as_its_trust_store_and_a_url_it_can_parse(pki: Pki) -> None:
    pg = PsqlConnection.from_url(f"postgresql://hs@db.ns.svc:5432/hs?sslmode=verify-full&sslrootcert={pki.ca}")
    assert pg.pgloader_url() == "postgresql://hs@db.ns.svc:5432/hs?sslmode=require"
    assert pg.pgloader_env()["SSL_CERT_FILE"] == str(pki.ca)
    assert pg.env()["PGSSLROOTCERT"] == str(pki.ca)
    assert pg.env()["PGSSLMODE"] == "verify-full"
