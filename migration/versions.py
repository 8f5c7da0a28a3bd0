"""What each pinned Headscale version's database must look like, on both sides of the migration.

The Job runs without the reference data, so the facts are written down here and tests/migration checks them
against the reference: column names against upstream's SQLite ``schema.sql``, PostgreSQL types, foreign keys
and migration ids against ``postgres-schema.derived.sql`` (a reconstruction of what Headscale creates on an
empty PostgreSQL database).

Sources of the migration ids: upstream ``hscontrol/db/db.go`` (the gormigrate list; read for 0.28.0 up to
``202601121700-migrate-hostinfo-request-tags``; 0.29 appends the three ``2026022012``..``2026061812`` data
fixes, the last one shipped in 0.29.1) and the ``INSERT INTO migrations`` of the derived schema, which lists
the same ids. On a fresh database gormigrate writes ``SCHEMA_INIT`` plus every id; a database upgraded from
older releases holds more (pre-0.25 ids), which is fine: only missing ids mean the SQLite database was not
yet migrated by the pinned version.
"""

from __future__ import annotations

from dataclasses import dataclass

from migration.errors import MigrationError

BIGINT = "bigint"
BOOLEAN = "boolean"
TIMESTAMPTZ = "timestamp with time zone"
BYTEA = "bytea"
TEXT = "text"


def varchar(length: int) -> str:
    """information_schema spelling of ``varchar(n)``, so specs compare directly to the catalog."""
    return f"character varying({length})"


@dataclass(frozen=True)
class Column:
    """One column: its PostgreSQL type decides which SQLite values fit and how values are compared."""

    name: str
    pg_type: str
    nullable: bool = True
    json: bool = False  # Headscale stores it with GORM's JSON serializer: must parse when not empty
    secret: bool = False  # key material (a key, a hash of one): no message ever shows its value

    @property
    def max_length(self) -> int | None:
        """Length limit of a varchar column (SQLite ignores it, PostgreSQL rejects the row)."""
        if self.pg_type.startswith("character varying("):
            return int(self.pg_type.removeprefix("character varying(").rstrip(")"))
        return None


@dataclass(frozen=True)
class Table:
    """A Headscale table; ``serial`` means PostgreSQL owns an id sequence that must end above max(id)."""

    name: str
    columns: tuple[Column, ...]
    primary_key: str = "id"
    serial: bool = True
    bookkeeping: bool = False  # written by Headscale itself on an empty database (migrations, versions)

    def column(self, name: str) -> Column:
        """The column called ``name`` (KeyError when the table has none)."""
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name}.{name}")


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key as PostgreSQL must hold it after the load (pgloader drops and re-creates them)."""

    name: str
    table: str
    column: str
    ref_table: str
    ref_column: str
    on_delete: str  # SQL spelling: "SET NULL", "CASCADE", "NO ACTION"

    def ddl(self) -> str:
        """ALTER TABLE statement that re-creates the constraint (used by reset_target)."""
        return (
            f'ALTER TABLE public."{self.table}" ADD CONSTRAINT "{self.name}" FOREIGN KEY ("{self.column}") '
            f'REFERENCES public."{self.ref_table}" ("{self.ref_column}") ON DELETE {self.on_delete}'
        )


@dataclass(frozen=True)
class Index:
    """A btree index Headscale creates (besides primary keys): each row must fit it, and be unique if ``unique``.

    ``where`` is the partial index's predicate, written so SQLite and PostgreSQL both evaluate it.
    """

    name: str
    table: str
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None

    def ddl(self, name: str | None = None) -> str:
        """CREATE INDEX statement (tests compare it with the reference schema through PostgreSQL's catalog)."""
        unique = "UNIQUE " if self.unique else ""
        where = f" WHERE {self.where}" if self.where else ""
        columns = ", ".join(f'"{column}"' for column in self.columns)
        return f'CREATE {unique}INDEX "{name or self.name}" ON public."{self.table}" ({columns}){where}'


@dataclass(frozen=True)
class HeadscaleSchema:
    """Everything the steps check for one pinned version."""

    version: str
    tables: tuple[Table, ...]
    foreign_keys: tuple[ForeignKey, ...]
    migration_ids: tuple[str, ...]
    indexes: tuple[Index, ...] = ()

    @property
    def table_names(self) -> tuple[str, ...]:
        """The tables pgloader copies, parents before children."""
        return tuple(table.name for table in self.tables)

    @property
    def data_tables(self) -> tuple[str, ...]:
        """Tables holding tailnet data: a target with rows in any of them is not empty."""
        return tuple(table.name for table in self.tables if not table.bookkeeping)

    def table(self, name: str) -> Table:
        """The table called ``name`` (KeyError when the version has none)."""
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)

    @property
    def minor(self) -> str:
        """``0.29`` for ``0.29.2``: Headscale refuses to skip minors, patch levels may differ."""
        return ".".join(self.version.split(".")[:2])


def _gorm_model(*columns: Column) -> tuple[Column, ...]:
    """id + gorm.Model timestamps + the table's own columns."""
    return (
        Column("id", BIGINT, nullable=False),
        Column("created_at", TIMESTAMPTZ),
        Column("updated_at", TIMESTAMPTZ),
        Column("deleted_at", TIMESTAMPTZ),
        *columns,
    )


MIGRATIONS = Table("migrations", (Column("id", varchar(255), nullable=False),), serial=False, bookkeeping=True)
USERS = Table(
    "users",
    _gorm_model(
        Column("name", TEXT),
        Column("display_name", TEXT),
        Column("email", TEXT),
        Column("provider_identifier", TEXT),
        Column("provider", TEXT),
        Column("profile_pic_url", TEXT),
    ),
)
PRE_AUTH_KEYS = Table(
    "pre_auth_keys",
    (
        Column("id", BIGINT, nullable=False),
        Column("key", TEXT, secret=True),  # a legacy plaintext pre-auth key
        Column("prefix", TEXT),
        Column("hash", BYTEA, secret=True),
        Column("user_id", BIGINT),
        Column("reusable", BOOLEAN),
        Column("ephemeral", BOOLEAN),
        Column("used", BOOLEAN),
        Column("tags", TEXT, json=True),
        Column("created_at", TIMESTAMPTZ),
        Column("expiration", TIMESTAMPTZ),
    ),
)
API_KEYS = Table(
    "api_keys",
    (
        Column("id", BIGINT, nullable=False),
        Column("prefix", TEXT),
        Column("hash", BYTEA, secret=True),
        Column("created_at", TIMESTAMPTZ),
        Column("expiration", TIMESTAMPTZ),
        Column("last_seen", TIMESTAMPTZ),
    ),
)
NODES = Table(
    "nodes",
    (
        Column("id", BIGINT, nullable=False),
        Column("machine_key", TEXT),
        Column("node_key", TEXT),
        Column("disco_key", TEXT),
        Column("endpoints", TEXT, json=True),
        Column("host_info", TEXT, json=True),
        Column("ipv4", TEXT),
        Column("ipv6", TEXT),
        Column("hostname", TEXT),
        Column("given_name", varchar(63)),
        Column("user_id", BIGINT),
        Column("register_method", TEXT),
        Column("tags", TEXT, json=True),
        Column("auth_key_id", BIGINT),
        Column("expiry", TIMESTAMPTZ),
        Column("last_seen", TIMESTAMPTZ),
        Column("approved_routes", TEXT, json=True),
        Column("created_at", TIMESTAMPTZ),
        Column("updated_at", TIMESTAMPTZ),
        Column("deleted_at", TIMESTAMPTZ),
    ),
)
POLICIES = Table("policies", _gorm_model(Column("data", TEXT)))  # HuJSON (comments allowed): not checked as JSON
DATABASE_VERSIONS = Table(
    "database_versions",
    (
        Column("id", BIGINT, nullable=False),
        Column("version", TEXT, nullable=False),
        Column("updated_at", TIMESTAMPTZ),
    ),
    bookkeeping=True,
)

FOREIGN_KEYS = (
    ForeignKey("fk_pre_auth_keys_user", "pre_auth_keys", "user_id", "users", "id", "SET NULL"),
    ForeignKey("fk_nodes_user", "nodes", "user_id", "users", "id", "CASCADE"),
    ForeignKey("fk_nodes_auth_key", "nodes", "auth_key_id", "pre_auth_keys", "id", "NO ACTION"),
)

# The explicit indexes of postgres-schema.derived.sql (the same in 0.28 and 0.29; tests compare them through
# PostgreSQL's catalog). Primary keys are left out: bigint ids, and migrations.id of at most 255 characters.
INDEXES = (
    Index("idx_users_deleted_at", "users", ("deleted_at",)),
    Index("idx_api_keys_prefix", "api_keys", ("prefix",), unique=True),
    Index("idx_policies_deleted_at", "policies", ("deleted_at",)),
    Index(
        "idx_provider_identifier",
        "users",
        ("provider_identifier",),
        unique=True,
        where="provider_identifier IS NOT NULL",
    ),
    Index("idx_name_provider_identifier", "users", ("name", "provider_identifier"), unique=True),
    Index("idx_name_no_provider_identifier", "users", ("name",), unique=True, where="provider_identifier IS NULL"),
    Index(
        "idx_pre_auth_keys_prefix",
        "pre_auth_keys",
        ("prefix",),
        unique=True,
        where="prefix IS NOT NULL AND prefix <> ''",
    ),
)

MIGRATION_IDS_0_28 = (
    "SCHEMA_INIT",
    "202501221827",
    "202501311657",
    "202502070949",
    "202502131714",
    "202502171819",
    "202505091439",
    "202505141324",
    "202507021200",
    "202510311551",
    "202511101554-drop-old-idx",
    "202511011637-preauthkey-bcrypt",
    "202511122344-remove-newline-index",
    "202511131445-node-forced-tags-to-tags",
    "202601121700-migrate-hostinfo-request-tags",
)
MIGRATION_IDS_0_29 = (
    *MIGRATION_IDS_0_28,
    "202602201200-clear-tagged-node-user-id",
    "202605221435-clear-zero-time-node-expiry",
    "202606181200-recover-null-tags-node-user-id",
)

SCHEMAS: dict[str, HeadscaleSchema] = {
    "0.28.0": HeadscaleSchema(
        "0.28.0",
        (MIGRATIONS, USERS, PRE_AUTH_KEYS, API_KEYS, NODES, POLICIES),
        FOREIGN_KEYS,
        MIGRATION_IDS_0_28,
        INDEXES,
    ),
    "0.29.2": HeadscaleSchema(
        "0.29.2",
        (DATABASE_VERSIONS, MIGRATIONS, USERS, PRE_AUTH_KEYS, API_KEYS, NODES, POLICIES),
        FOREIGN_KEYS,
        MIGRATION_IDS_0_29,
        INDEXES,
    ),
}


def schema_for(version: str) -> HeadscaleSchema:
    """The spec of a pinned version (``0.29.2`` or ``v0.29.2``); any other version is refused, not guessed."""
    key = version.removeprefix("v")
    if key not in SCHEMAS:
        known = ", ".join(sorted(SCHEMAS))
        raise MigrationError("preflight", f"no migration spec for Headscale {version!r} (known: {known})")
    return SCHEMAS[key]
