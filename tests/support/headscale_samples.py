"""Headscale SQLite databases built from upstream's schema.sql, with rows shaped like Headscale writes them.

Times are Go's driver format with nanoseconds (``2026-03-01 10:15:30.123456789+00:00``), booleans 0/1, hashes
as blobs, tags/endpoints/host info as JSON text, the policy as HuJSON; Litestream's tables sit beside them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from migration.versions import schema_for

SHARED_DIR = Path(__file__).resolve().parents[3] / "shared"  # ../shared beside the checkout
VERSIONS = ("0.28.0", "0.29.2")
OLDER_MIGRATION_IDS = ("202312101416", "202312101430", "202402151347", "2024041121742", "202406021630")

POLICY = """// tailnet policy (HuJSON)
{
\t"tagOwners": {"tag:server": ["alice@"], "tag:prod": ["group:ops"],},
\t"groups": {"group:ops": ["alice@", "oidc-user@example.com"]},
\t"acls": [{"action": "accept", "src": ["group:ops"], "dst": ["tag:server:22"]}], /* trailing comma ok */
}
"""


def schema_sql(version: str) -> str:
    """Upstream's SQLite schema of ``version``."""
    return (SHARED_DIR / "reference" / "headscale" / version / "hscontrol" / "db" / "schema.sql").read_text()


def host_info(hostname: str, *, tags: list[str] | None = None) -> str:
    """A tailcfg.Hostinfo as Headscale stores it (Go's JSON, non-ASCII kept)."""
    info = {
        "IPNVersion": "1.80.3-t1234abcd",
        "FrontendLogID": "",
        "BackendLogID": "5a1b" * 16,
        "OS": "linux",
        "OSVersion": "Debian 12.9 (bookworm); kernel=6.1.0-31-amd64",
        "Hostname": hostname,
        "Machine": "x86_64",
        "GoArch": "amd64",
        "RoutableIPs": ["10.20.0.0/16"],
        "RequestTags": tags or [],
        "Services": [{"Proto": "tcp", "Port": 22, "Description": "sshd"}, {"Proto": "peerapi4", "Port": 41203}],
        "NetInfo": {
            "MappingVariesByDestIP": False,
            "WorkingIPv6": True,
            "WorkingUDP": True,
            "PreferredDERP": 1,
            "DERPLatency": {"1-v4": 0.0123, "1-v6": 0.0145, "2-v4": 0.031},
        },
        "Userspace": False,
        "Location": {"Country": "Österreich", "City": "Wien ☕"},
    }
    return json.dumps(info, ensure_ascii=False, separators=(",", ":"))


def ts(second: int, *, nanos: int = 123456789, zone: str = "+00:00") -> str:
    """A time in Go's SQLite format, ``second`` seconds into 2026-03-01 (UTC unless ``zone``)."""
    minute, sec = divmod(second % 3600, 60)
    hour = (10 + second // 3600) % 24
    return f"2026-03-01 {hour:02d}:{minute:02d}:{sec:02d}.{nanos:09d}{zone}"


def create(path: Path, version: str, *, litestream: bool = True) -> sqlite3.Connection:
    """An empty database of ``version`` (plus Litestream's bookkeeping tables, as in production)."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(schema_sql(version))
    if litestream:
        conn.executescript(
            "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"
            "CREATE TABLE _litestream_lock (id INTEGER);"
            "INSERT INTO _litestream_seq VALUES (1, 42);"
        )
    ids = [*schema_for(version).migration_ids, *OLDER_MIGRATION_IDS]
    conn.executemany("INSERT INTO migrations (id) VALUES (?)", [(i,) for i in ids])
    if "database_versions" in schema_for(version).table_names:
        conn.execute("INSERT INTO database_versions VALUES (1, ?, ?)", (f"v{version}", ts(1)))
    return conn


def build(path: Path, version: str) -> Path:
    """The realistic small tailnet every test starts from."""
    conn = create(path, version)
    users = [
        (1, "alice", "Alice Admin", "alice@example.com", None, None, None, ts(10), ts(11), None),
        (
            2, "oidc-user", "Jörg Ünicode", "oidc-user@example.com",
            "https://idp.example.com/realms/tailnet/9f1c5a2e-77b1-4b0e-9a3e-2d6f1c0e8b11", "oidc",
            "https://idp.example.com/avatar/2.png", ts(20, nanos=999999500), ts(21, zone="+02:00"), None,
        ),
        (3, "gone", "", "", None, None, "", ts(30), ts(31), ts(32)),  # soft-deleted
    ]  # fmt: skip
    conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", users)
    bcrypt = b"$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"
    keys = [
        # id, key, prefix, hash, user_id, reusable, ephemeral, used, tags, expiration, created_at
        (1, "6e7f" * 12, None, None, 1, 1, 0, 1, None, ts(3000), ts(100)),  # legacy plaintext key
        (2, "", "a1b2c3d4e5f6", bcrypt, 2, 0, 0, 1, "[]", ts(3000), ts(200, nanos=0)),  # hashed
        (3, "", "f6e5d4c3b2a1", bcrypt, None, 1, 0, 1, '["tag:server","tag:prod"]', ts(3000), ts(300)),  # tagged
        (4, "", "0a0b0c0d0e0f", bcrypt, 1, 0, 1, 0, None, "2025-01-01 00:00:00+00:00", ts(400)),  # expired
    ]
    conn.executemany("INSERT INTO pre_auth_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", keys)
    conn.executemany(
        "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?)",
        [
            (1, "hskey-api-ab", bcrypt, ts(9000), ts(500), ts(50)),
            (2, "abcdef123456", bytes(range(256)), ts(9000), None, ts(60)),
        ],
    )
    conn.executemany(
        "INSERT INTO nodes (id, machine_key, node_key, disco_key, endpoints, host_info, ipv4, ipv6, hostname,"
        " given_name, user_id, register_method, tags, auth_key_id, last_seen, expiry, approved_routes,"
        " created_at, updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        list(_nodes()),
    )
    conn.execute("INSERT INTO policies (id, data, created_at, updated_at) VALUES (1, ?, ?, ?)", (POLICY, ts(5), ts(6)))
    conn.commit()
    conn.close()
    return path


def _nodes() -> Iterator[tuple[object, ...]]:
    endpoints = '["203.0.113.7:41641","[2001:db8::7]:41641","192.168.1.7:41641"]'
    yield (
        1, "mkey:" + "11" * 32, "nodekey:" + "22" * 32, "discokey:" + "33" * 32, endpoints, host_info("laptop"),
        "100.64.0.1", "fd7a:115c:a1e0::1", "laptop", "laptop", 1, "authkey", "[]", 1, ts(600), None,
        '["10.20.0.0/16","0.0.0.0/0","::/0"]', ts(110), ts(610), None,
    )  # fmt: skip
    yield (
        2,
        "mkey:" + "44" * 32,
        "nodekey:" + "55" * 32,
        "discokey:" + "66" * 32,
        endpoints,
        host_info("db-1", tags=["tag:server"]),
        "100.64.0.2",
        "fd7a:115c:a1e0::2",
        "db-1",
        "db-1",
        None,
        "authkey",
        '["tag:prod","tag:server"]',
        3,
        ts(700),
        "0001-01-01 00:00:00+00:00",
        "[]",
        ts(310),
        ts(710),
        None,
    )  # fmt: skip  (tagged: no user; Go's zero time as expiry)
    yield (
        3,
        "mkey:" + "77" * 32,
        "nodekey:" + "88" * 32,
        "discokey:" + "99" * 32,
        "null",
        host_info("phone"),
        "100.64.0.3",
        None,
        "Jörgs iPhone",
        "jorgs-iphone",
        2,
        "oidc",
        None,
        None,
        None,
        ts(8000, zone="-05:00"),
        None,
        ts(120),
        ts(120),
        None,
    )  # fmt: skip  (OIDC-registered: no pre-auth key)
    yield (
        4,
        "mkey:" + "aa" * 32,
        "nodekey:" + "bb" * 32,
        "",
        None,
        "",
        "100.64.0.4",
        "fd7a:115c:a1e0::4",
        "old",
        "old",
        1,
        "cli",
        "[]",
        2,
        ts(130),
        ts(130),
        None,
        ts(130),
        ts(130),
        ts(140),
    )  # fmt: skip  (soft-deleted)


def build_large(path: Path, version: str, *, nodes: int, keys: int) -> Path:
    """``nodes`` nodes and ``keys`` pre-auth keys over 50 users (the bench's tailnet)."""
    conn = create(path, version)
    conn.executemany(
        "INSERT INTO users (id, name, email, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        [(i, f"user{i}", f"user{i}@example.com", ts(i), ts(i)) for i in range(1, 51)],
    )
    bcrypt = b"$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"
    conn.executemany(
        "INSERT INTO pre_auth_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            (i, "", f"{i:012x}", bcrypt, i % 50 + 1, i % 2, 0, 1, '["tag:server"]' if i % 3 == 0 else None,
             ts(i + 3600), ts(i))
            for i in range(1, keys + 1)
        ),
    )  # fmt: skip
    conn.executemany(
        "INSERT INTO nodes (id, machine_key, node_key, disco_key, endpoints, host_info, ipv4, ipv6, hostname,"
        " given_name, user_id, register_method, tags, auth_key_id, last_seen, expiry, approved_routes,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            (i, f"mkey:{i:064x}", f"nodekey:{i:064x}", f"discokey:{i:064x}", '["203.0.113.7:41641"]',
             host_info(f"node-{i}"), f"100.{64 + i // 65536}.{i // 256 % 256}.{i % 256}", f"fd7a:115c:a1e0::{i:x}",
             f"node-{i}", f"node-{i}", i % 50 + 1, "authkey", "[]", i % keys + 1 if keys else None, ts(i), None,
             "[]", ts(i), ts(i))
            for i in range(1, nodes + 1)
        ),
    )  # fmt: skip
    conn.commit()
    conn.close()
    return path


def with_deleted_newest(path: Path, *, users: int = 10, keys: int = 20, nodes: int = 50) -> Path:
    """Headscale's history on top of ``build``: rows registered after the survivors and deleted again.

    Every table is AUTOINCREMENT, so ``sqlite_sequence`` keeps the highest id ever handed out (users 10, pre-auth
    keys 20, nodes 50 by default) while max(id) stays 3, 4 and 4: SQLite hands out 11, 21, 51 next, never 4 or 5.
    """
    conn = sqlite3.connect(path)
    for table, last in (("users", users), ("pre_auth_keys", keys), ("nodes", nodes)):
        (top,) = conn.execute(f"SELECT max(id) FROM {table}").fetchone()
        conn.executemany(f"INSERT INTO {table} (id) VALUES (?)", [(i,) for i in range(top + 1, last + 1)])
        conn.execute(f"DELETE FROM {table} WHERE id > ?", (top,))
    conn.commit()
    conn.close()
    return path


def with_wal_frames(path: Path, dest_dir: Path, *, keep_shm: bool = False) -> Path:
    """A WAL-mode copy of ``path`` in ``dest_dir`` whose newest rows live only in its ``-wal`` (uncheckpointed).

    Adds user 4 and node 5 (registered by that user) in WAL mode with checkpoints off, then copies the database
    and its -wal (and -shm with ``keep_shm``) while the writer still holds them open, as a stopped Headscale pod
    leaves them. The copy's main file does not hold those rows; only a reader that applies the WAL sees them.
    """
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("INSERT INTO users (id, name, created_at) VALUES (4, 'wal-user', ?)", (ts(4000),))
    conn.execute(
        "INSERT INTO nodes (id, machine_key, node_key, hostname, given_name, user_id, register_method, created_at)"
        " VALUES (5, ?, ?, 'wal-node', 'wal-node', 4, 'cli', ?)",
        ("mkey:" + "cd" * 32, "nodekey:" + "ef" * 32, ts(4001)),
    )
    conn.commit()
    dest_dir.mkdir(parents=True, exist_ok=True)
    suffixes = ["", "-wal", *(["-shm"] if keep_shm else [])]
    for suffix in suffixes:
        (dest_dir / (path.name + suffix)).write_bytes(Path(str(path) + suffix).read_bytes())
    conn.close()
    return dest_dir / path.name


_BYTES = "parsing policy from bytes: json: cannot unmarshal JSON string into Go v2."
#: A refused policy → Headscale's words after "parsing policy: " in 0.28 and 0.29 (as test_real_headscale.py saw).
POLICY_REFUSALS = {
    '{"acls": [{"action": "accept", "dst": ["tag:b:22"], "src": ["group:a"]}]}': (
        'multiple errors:\n\tGroup "group:a" is not defined in the Policy, please define or remove the reference to it'
        '\n\tTag "tag:b" is not defined in the Policy, please define or remove the reference to it',
        'multiple errors:\n\tgroup not defined in policy: "group:a"\n\tdst="tag:b": tag not found: "tag:b"',
    ),
    '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:99999"]}]}': (
        f'{_BYTES}AliasWithPorts within "/acls/0/dst/0": port number out of range',
        f'{_BYTES}AliasWithPorts within "/acls/0/dst/0": dst="*:99999": port range "99999": port number out of range',
    ),
    '{"acls": [{"action": "drop", "src": ["*"], "dst": ["*:*"]}]}': (
        f'{_BYTES}Action within "/acls/0/action": invalid action "drop", must be "accept"',
        f'{_BYTES}Action within "/acls/0/action": action="drop" is not supported: invalid ACL action',
    ),
    '{"aclz": []}': ('unknown field "aclz"', 'unknown field: "aclz"'),
    "{acls: []}": ("parsing HuJSON: hujson: line 1, column 2: invalid literal: acls",) * 2,  # HuJSON is not JSON5
}
