"""A throwaway PostgreSQL server for the migration tests and bench: real binaries, a temp dir, TCP on localhost.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the ``postgres`` user (or
``nobody``) with its data and socket directory in a fresh /tmp directory owned by that user. Clients (psql,
pgloader) connect over TCP with a password, like the Job does against CloudNativePG.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from migration.psql import PsqlConnection
from tests.support.free_ports import free_port

PROJECT_DIR = Path(__file__).resolve().parents[2]
SHARED_DIR = PROJECT_DIR.parent / "shared"
APP_USER = "headscale"


def postgres_bindir() -> Path | None:
    """Directory holding initdb/pg_ctl/postgres: $PG_BINDIR, Debian's versioned dirs (15 first), or PATH."""
    candidates = [os.environ.get("PG_BINDIR", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: (not p.endswith("/15/bin"), p))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for candidate in candidates:
        if candidate and all((Path(candidate) / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(candidate)
    return None


def missing_tools() -> str | None:
    """Why the real-tool tests cannot run here, or None when they can."""
    if postgres_bindir() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; set PG_BINDIR"
    for tool in ("psql", "pgloader"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a postgres nor a nobody account exists")


@dataclass
class PgServer:
    """A running server; ``admin`` is the superuser, ``app(dbname)`` the non-superuser Headscale role."""

    root: Path
    port: int
    bindir: Path
    admin_password: str = field(repr=False)
    app_password: str = field(repr=False)
    user: pwd.struct_passwd | None = None

    @classmethod
    def start(cls, *, tls: tuple[Path, Path] | None = None) -> PgServer:
        """initdb with scram passwords, start on a free port, create the app role.

        ``tls``: (certificate, key) PEM files the server presents (ssl=on), as CloudNativePG's server does.
        """
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError(missing_tools() or "no PostgreSQL")
        user = _server_user()
        root = Path(tempfile.mkdtemp(prefix="hsmig-pg-", dir="/tmp"))
        server = cls(root, free_port(), bindir, secrets.token_hex(16), secrets.token_hex(16), user)
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        pwfile = root / "pw"
        pwfile.write_text(server.admin_password + "\n")
        if user is not None:
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        try:
            server._as_server(
                "initdb", "-D", str(root / "data"), "-U", "postgres", f"--pwfile={pwfile}",
                "--auth=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync",
            )  # fmt: skip
            pwfile.unlink()
            options = (
                f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
                " -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
            )
            if tls is not None:
                options += server._install_tls(*tls)
            server._as_server("pg_ctl", "-D", str(root / "data"), "-o", options, "-l", str(root / "log"), "-w", "start")
            server.admin().execute(f"CREATE ROLE {APP_USER} LOGIN PASSWORD '{server.app_password}' CREATEDB;")
        except BaseException:
            server.stop()
            raise
        return server

    def _install_tls(self, certificate: Path, key: Path) -> str:
        """Copy the server's certificate and key where only the server user reads them; the ssl options."""
        paths = []
        for source, name in ((certificate, "server.crt"), (key, "server.key")):
            target = self.root / name
            shutil.copyfile(source, target)
            os.chmod(target, 0o600)  # PostgreSQL refuses a key that others can read
            if self.user is not None:
                os.chown(target, self.user.pw_uid, self.user.pw_gid)
            paths.append(target)
        return f" -c ssl=on -c ssl_cert_file={paths[0]} -c ssl_key_file={paths[1]}"

    def _as_server(self, tool: str, *args: str) -> None:
        kwargs: dict[str, object] = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        subprocess.run(
            [str(self.bindir / tool), *args],
            check=True,
            capture_output=True,
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "TZ": "UTC"},
            **kwargs,  # type: ignore[arg-type]
        )

    def admin(self, dbname: str = "postgres") -> PsqlConnection:
        """Superuser connection (creating and dropping databases)."""
        return PsqlConnection("127.0.0.1", self.port, "postgres", dbname, password=self.admin_password)

    def app(self, dbname: str) -> PsqlConnection:
        """The Headscale role's connection: owner of the test databases, not a superuser."""
        return PsqlConnection("127.0.0.1", self.port, APP_USER, dbname, password=self.app_password)

    def create_database(self, name: str, *, template: str | None = None) -> PsqlConnection:
        """A new database owned by the app role, optionally a copy of ``template``."""
        clause = f" TEMPLATE {template}" if template else ""
        self.admin().query(f"CREATE DATABASE {name} OWNER {APP_USER}{clause}")
        return self.app(name)

    def headscale_database(self, name: str, version: str) -> PsqlConnection:
        """A database as Headscale ``version`` leaves it after opening it empty (from the derived schema)."""
        template = "tpl_" + version.replace(".", "_")
        exists = self.admin().query(f"SELECT 1 FROM pg_database WHERE datname = '{template}'")
        if not exists:
            ddl = SHARED_DIR / "reference" / "headscale" / version / "postgres-schema.derived.sql"
            self.create_database(template).execute(ddl.read_text())
        return self.create_database(name, template=template)

    def stop(self) -> None:
        """Stop immediately and delete everything."""
        if (self.root / "data" / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self._as_server("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
