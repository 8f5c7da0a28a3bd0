"""What an attacker who can write the NFS export (and read it) but holds no key can do to a Litestream file replica,
and what a holder of the key can sign: the tools of tests/components/test_litestream_planting.py.

Facts of the LTX format these rely on (superfly/ltx 0.5, what Litestream 0.5.17 writes): a 100-byte header that
starts with the magic ``LTX1`` and carries the minimum and maximum TXID at bytes 16-23 and 24-31 (big-endian); file
names ``<min>-<max>.ltx`` in 16 lowercase hex digits, from which Litestream takes a file's range without reading it.
"""

from __future__ import annotations

import hashlib
import hmac
import shutil
import time
from pathlib import Path

from tests.support.litestream_lab import (
    App,
    ScriptResult,
    insert_rows,
    litestream_bin,
    replicate_app_once,
    run_restore_script,
)

MAGIC = "headscale-ha-replica-manifest 1"


def ltx_name(min_txid: int, max_txid: int) -> str:
    return f"{min_txid:016x}-{max_txid:016x}.ltx"


def header_range(path: Path) -> tuple[int, int]:
    """The (min, max) TXID an LTX file's header names."""
    head = path.read_bytes()[:32]
    assert head[:4] == b"LTX1", f"{path} is not an LTX file"
    return int.from_bytes(head[16:24], "big"), int.from_bytes(head[24:32], "big")


def replica_files(app: App) -> list[tuple[int, str]]:
    """(level, name) of every LTX file of the replica, sorted."""
    return sorted((int(path.parent.name), path.name) for path in app.replica_dir.glob("ltx/[0-9]/*.ltx"))


def manifest_files(app: App) -> list[tuple[int, str]]:
    """(level, name) of every file the manifest lists."""
    lines = app.manifest.read_text().splitlines()
    return sorted((int(line.split()[1]), line.split()[2]) for line in lines if line.startswith("f "))


def write_signed_manifest(
    app: App,
    key_file: Path,
    *,
    name: str | None = None,
    signed_at: int | None = None,
    files: list[tuple[int, str]] | None = None,
) -> None:
    """A manifest over ``files`` (default: every LTX file of the replica) signed with the key, as a holder of the key
    writes it: what a signer before the signing rule signed, or a manifest for another application."""
    listed = replica_files(app) if files is None else sorted(files)
    lines = []
    for level, file_name in listed:
        data = (app.replica_dir / "ltx" / str(level) / file_name).read_bytes()
        lines.append(f"f {level} {file_name} {len(data)} {hashlib.sha256(data).hexdigest()}\n")
    txid = max(file_name[17:33] for _, file_name in listed)
    body = (
        f"{MAGIC}\napp {name or app.name}\nsigned_at {signed_at or int(time.time())}\ntxid {txid}\n"
        f"files {len(lines)}\n{''.join(lines)}"
    )
    mac = hmac.new(key_file.read_text().strip().encode(), body.encode(), hashlib.sha256).hexdigest()
    app.manifest.write_text(f"{body}hmac {mac}\n")


def next_pod(previous: App, root: Path) -> App:
    """A new pod of the same application on a fresh local volume, with the previous pod's backup directory."""
    pod = App(root, name=previous.name).create()
    shutil.copytree(previous.backup_dir, pod.backup_dir)
    return pod


def signed_restore(app: App, key: Path, **env: str) -> ScriptResult:
    """The pod's restore script (real Litestream, sh) with the backup key; ``env`` adds variables."""
    binary = litestream_bin()
    assert binary is not None
    return run_restore_script(["sh"], binary, app, backup_key=key, extra_env=env)


def foreign_snapshot(binary: Path, root: Path, rows: int) -> Path:
    """An attacker's database (``rows`` rows of its own) replicated once with the real Litestream: its first
    level-0 LTX file, which holds the whole database."""
    app = App(root).create()
    insert_rows(app.db_path, rows)
    replicate_app_once(binary, app)
    first = sorted(app.replica_dir.glob("ltx/0/*.ltx"))[0]
    assert header_range(first)[0] == 1
    return first


def with_header_range(source: Path, target: Path, min_txid: int, max_txid: int) -> Path:
    """A copy of ``source`` whose header names ``min_txid``-``max_txid``, resealed (its file checksum recomputed) so
    that Litestream reads it as valid: what a careful attacker with the LTX library crafts."""
    data = bytearray(source.read_bytes())
    data[16:32] = min_txid.to_bytes(8, "big") + max_txid.to_bytes(8, "big")
    target.write_bytes(resealed(bytes(data)))
    return target


# --- the LTX file checksum, as superfly/ltx 0.5 computes it --------------------------------------------------
# The trailer's last 8 bytes are ChecksumFlag (1 << 63) | CRC-64/ISO of the header, every page header and size, every
# page's *uncompressed* bytes (pages are LZ4 blocks), the end-of-pages header, the page index and the trailer's first
# 8 bytes. So a changed header needs the pages decompressed to reseal the file.
_HEADER_SIZE, _PAGE_HEADER_SIZE, _PAGE_FLAG_SIZE = 100, 6, 1


def _crc64_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD800000000000000 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64 = _crc64_table()


def _crc64_iso(chunks: list[bytes]) -> int:
    crc = 0xFFFFFFFFFFFFFFFF
    for chunk in chunks:
        for byte in chunk:
            crc = _CRC64[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFFFFFFFFFF


def _lz4_length(src: bytes, i: int, nibble: int) -> tuple[int, int]:
    """A length of an LZ4 sequence (its token's nibble, extended by bytes while they are 255) and the next index."""
    length = nibble
    if nibble == 15:
        while True:
            length += src[i]
            i += 1
            if src[i - 1] != 255:
                break
    return length, i


def _lz4_block(src: bytes) -> bytes:
    """Decompress one LZ4 block (the format's sequences of literals and matches)."""
    out = bytearray()
    i = 0
    while i < len(src):
        token = src[i]
        literals, i = _lz4_length(src, i + 1, token >> 4)
        out += src[i : i + literals]
        i += literals
        if i >= len(src):
            break
        offset = src[i] | src[i + 1] << 8
        length, i = _lz4_length(src, i + 2, token & 15)
        start = len(out) - offset
        for k in range(length + 4):
            out.append(out[start + k])
    return bytes(out)


def resealed(data: bytes) -> bytes:
    """``data`` (an LTX file) with its file checksum recomputed over its current bytes."""
    hashed = [data[:_HEADER_SIZE]]
    at = _HEADER_SIZE
    while True:
        page_header = data[at : at + _PAGE_HEADER_SIZE]
        at += _PAGE_HEADER_SIZE
        hashed.append(page_header)
        if int.from_bytes(page_header[:4], "big") == 0:
            break
        assert int.from_bytes(page_header[4:6], "big") & _PAGE_FLAG_SIZE, "an LTX 0.5 page carries its size"
        size = int.from_bytes(data[at : at + 4], "big")
        hashed.append(data[at : at + 4])
        hashed.append(_lz4_block(data[at + 4 : at + 4 + size]))
        at += 4 + size
    hashed.append(data[at:-8])
    checksum = (1 << 63) | _crc64_iso(hashed)
    return data[:-8] + checksum.to_bytes(8, "big")


def plant(source: Path, app: App, level: int, file_name: str) -> Path:
    """Copy ``source`` into the victim's replica under ``level``/``file_name``, as an export writer can."""
    target = app.replica_dir / "ltx" / str(level) / file_name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target
