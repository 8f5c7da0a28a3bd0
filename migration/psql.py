"""PostgreSQL through the ``psql`` CLI: the Job image needs no driver, and the password travels only in env.

Connection parameters go to psql as libpq environment variables (PGHOST, PGPASSWORD, ...), SQL goes on stdin,
results come back as CSV. Nothing secret is ever on a command line (visible in ``ps``) or in a message.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs, quote, unquote, urlsplit

from migration.errors import MigrationError, PsqlError

_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class PsqlConnection:
    """Where the target database is; ``password`` is kept out of repr, URLs and argv."""

    host: str
    port: int
    user: str
    dbname: str
    password: str | None = field(default=None, repr=False)
    sslmode: str | None = None
    sslrootcert: str | None = None  # the CA file the server's certificate must chain to (verify-ca/verify-full)
    psql: str = "psql"
    timeout: float = 600.0

    @classmethod
    def from_url(cls, url: str, *, password: str | None = None, psql: str = "psql") -> PsqlConnection:
        """Parse ``postgresql://user[:password]@host[:port]/dbname[?sslmode=...]``.

        A password in the URL is accepted (the URL may come from a Secret through env); ``password`` wins.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres", "pgsql"):
            raise MigrationError("target", "the target URL must start with postgresql://")
        query = parse_qs(parts.query)
        host = query.get("host", [parts.hostname or ""])[0]
        dbname = unquote(parts.path.lstrip("/"))
        user = unquote(parts.username or "")
        if not host or not dbname or not user:
            raise MigrationError("target", "the target URL needs a user, a host and a database name")
        for what, value in (("user", user), ("database", dbname)):
            if not _SAFE_NAME.fullmatch(value):
                raise MigrationError("target", f"the {what} name has characters pgloader URLs cannot carry")
        url_password = unquote(parts.password) if parts.password is not None else None
        return cls(
            host=host,
            port=parts.port or 5432,
            user=user,
            dbname=dbname,
            password=password if password is not None else url_password,
            sslmode=query.get("sslmode", [None])[0],
            sslrootcert=query.get("sslrootcert", [None])[0],
            psql=psql,
        )

    def url(self) -> str:
        """The URL without the password (pgloader reads PGPASSWORD, like psql)."""
        host = f"unix:{self.host}" if self.host.startswith("/") else self.host
        params = [
            f"{key}={quote(value)}"
            for key, value in (("sslmode", self.sslmode), ("sslrootcert", self.sslrootcert))
            if value
        ]
        suffix = "?" + "&".join(params) if params else ""
        return f"postgresql://{self.user}@{host}:{self.port}/{self.dbname}{suffix}"

    def pgloader_url(self) -> str:
        """The URL in pgloader's dialect: it knows sslmode disable/allow/prefer/require only, and its `require` (its
        Postmodern driver's `:yes`) verifies the chain against OpenSSL's trust store, which ``pgloader_env`` points
        at sslrootcert. So verify-ca/verify-full become `require` plus that trust store; pgloader does not compare
        the host name (psql, which does, checks the same server before and after the load)."""
        mode = "require" if self.sslmode in ("verify-ca", "verify-full") else self.sslmode
        return replace(self, sslmode=mode, sslrootcert=None).url()

    def pgloader_env(self) -> dict[str, str]:
        """``env()`` plus SSL_CERT_FILE: the only CA pgloader trusts is sslrootcert (it ignores PGSSLROOTCERT)."""
        env = self.env()
        if self.sslrootcert:
            env["SSL_CERT_FILE"] = self.sslrootcert
        return env

    def with_database(self, dbname: str) -> PsqlConnection:
        """The same server and credentials, another database."""
        return replace(self, dbname=dbname)

    def env(self) -> dict[str, str]:
        """Environment for psql and pgloader: libpq variables, UTC session, the password if any."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(
            PGHOST=self.host,
            PGPORT=str(self.port),
            PGUSER=self.user,
            PGDATABASE=self.dbname,
            PGTZ="UTC",
            PGCONNECT_TIMEOUT="10",
            PGAPPNAME="headscale-migration",
        )
        if self.sslmode:
            env["PGSSLMODE"] = self.sslmode
        if self.sslrootcert:
            env["PGSSLROOTCERT"] = self.sslrootcert
        if self.password is not None:
            env["PGPASSWORD"] = self.password
        return env

    def argv(self, *extra: str) -> list[str]:
        """psql's command line: no connection string, no password, SQL from stdin."""
        return [self.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--csv", "-t", *extra, "-f", "-"]

    def _run(self, sql: str, *extra: str) -> str:
        try:
            proc = subprocess.run(
                self.argv(*extra),
                input=sql,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError as error:
            raise PsqlError(f"psql not found ({self.psql})") from error
        except subprocess.TimeoutExpired as error:
            raise PsqlError(f"psql did not answer within {self.timeout:.0f} s") from error
        if proc.returncode != 0:
            detail = proc.stderr.strip() or f"exit code {proc.returncode}"
            if self.password:
                detail = detail.replace(self.password, "***")
            raise PsqlError(f"psql on {self.url()}: {detail}")
        return proc.stdout

    def query(self, sql: str) -> list[list[str]]:
        """Rows of one statement as strings (write queries so no column is NULL: CSV cannot tell '' from NULL)."""
        return [row for row in csv.reader(io.StringIO(self._run(sql))) if row]

    def scalar(self, sql: str) -> str:
        """The single value of a one-row, one-column query."""
        rows = self.query(sql)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise PsqlError(f"expected one value, got {len(rows)} rows")
        return rows[0][0]

    def execute(self, sql: str) -> None:
        """Run a script in one transaction (all or nothing)."""
        self._run(sql, "-1")
