#!/bin/sh
# Pre-upgrade init container for Headscale's SQLite database: a verified snapshot before a version change.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh, busybox tools, no sqlite3.
# Runs after the restore container and before the Litestream sidecar and Headscale, so nothing writes the
# database meanwhile. Headscale runs one-way schema migrations when it starts: before a newer version starts,
# this takes a consistent, integrity-checked copy of the database to the backup volume; an older version than
# the one that last started is refused, because it would run on a database its code does not know.
#
# Environment:
#   DB_PATH         Headscale's SQLite file on its local volume (absolute); never modified
#   BACKUP_DIR      Headscale's directory on the NFS backup volume (absolute, existing; written by the restore
#                   container); the marker and the snapshots live here
#   TO_VERSION      the Headscale version about to start (X.Y.Z, the image's version)
#   SCRATCH_DIR     a writable scratch directory (an emptyDir; absolute, only [A-Za-z0-9._/-] because its path
#                   becomes a file:// URL for Litestream); needs room for up to 3x the database and its WAL
#   LITESTREAM_BIN  optional: litestream executable (default: litestream)
#   BACKUP_KEY_FILE optional (signed backups): Headscale's backup key; with MANIFEST_SCRIPT (litestream-manifest.sh,
#                   absolute), each snapshot gets headscale.sqlite.hmac, its MAC under that key (the manifest
#                   script's snapshot-mac), so the downgrade procedure can tell it from one planted on the export
#                   (`litestream-manifest.sh check-snapshot`); an earlier attempt's snapshot is reused only when its
#                   MAC verifies
#
# The version marker "$BACKUP_DIR/headscale-version" holds the version (X.Y.Z) that last started on this
# database (written to a temp file, then mv, so a crash never leaves half a marker):
#   no local database (first start)   record TO_VERSION
#   no marker (first start with this) record TO_VERSION; no snapshot: no earlier version is known
#   marker == TO_VERSION              nothing to do
#   marker > TO_VERSION (downgrade)   refuse (exit 40), with the way back
#   marker < TO_VERSION (upgrade)     snapshot to "$BACKUP_DIR/pre-upgrade/<marker>-<TO_VERSION>/", then record
#                                     TO_VERSION; on any failure the marker is left alone, so the next start retries
#
# A snapshot directory holds headscale.sqlite (the database as the old version left it, one self-contained
# file), headscale.sqlite.sha256 (its digest, `sha256sum -c` format), source.sha256 (the digests of the local
# files it was taken from) and, with BACKUP_KEY_FILE, headscale.sqlite.hmac. It is built in "pre-upgrade/.<from>-<to>.partial" and renamed into place only when
# complete, so a snapshot directory is either complete or absent. A complete one whose digest still matches and
# whose source is the same local database is reused (an earlier attempt of this upgrade); any other one is moved
# aside to "<dir>.replaced-<UTC time>", never deleted.
#
# Consistency and verification: the local database file, plus its -wal (and a -journal) when present, never the
# -shm, is copied into SCRATCH_DIR; as nothing writes the database while this runs, the copies are a consistent
# pair. Litestream reads that copy (including the WAL frames not checkpointed yet) and writes a one-shot file
# replica of it in SCRATCH_DIR (`replicate -once`; it writes into the database it replicates, which is why it
# only ever sees the copy); `litestream restore -integrity-check full` then builds a single-file database from
# that replica and runs SQLite's full integrity check on it. Only a file that passed is copied to the backup
# volume, and the copy's digest is compared with the checked file's before it is committed.
#
# Exit codes:
#    0  ok: first start recorded, same version, or upgrade snapshot taken (or reused) and the marker recorded
#    2  bad invocation: missing/relative path, malformed TO_VERSION, SCRATCH_DIR unusable, no litestream
#   13  the marker, BACKUP_DIR, the pre-upgrade directory or a snapshot directory is a symbolic link, or the
#       marker does not hold a version X.Y.Z
#   20  BACKUP_DIR is missing or unreadable
#   40  downgrade refused: TO_VERSION is older than the version recorded in the marker
#   41  the snapshot did not verify: the local database is not SQLite, is damaged, or Litestream failed on it
#   42  the snapshot or the marker could not be written to the backup volume
#   43  the local database could not be copied into SCRATCH_DIR
#
# Trust: whoever can write the backup export can plant files there, so nothing read from it is followed or echoed
# blindly: a marker that is a link is refused, never read, and its content is only used (and shown) once it has
# the form X.Y.Z.
set -eu

PROG=litestream-pre-upgrade
EX_USAGE=2
EX_MARKER_UNTRUSTED=13
EX_BACKUP_DIR_UNAVAILABLE=20
EX_DOWNGRADE=40
EX_SNAPSHOT_INVALID=41
EX_SNAPSHOT_WRITE=42
EX_SCRATCH=43

SNAPSHOT_FILE=headscale.sqlite
WORK=
STAGING=

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info

# die CODE MESSAGE: one paragraph saying what happened and what to do, then exit CODE.
die() {
    printf '%s: REFUSING TO START (exit %s): %s\n' "$PROG" "$1" "$2" >&2
    exit "$1"
}

# Whatever this run leaves half-done (scratch copies, an uncommitted snapshot) goes, however it ends.
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    if [ -n "$STAGING" ]; then
        rm -rf "$STAGING"
    fi
    if [ -n "$WORK" ]; then
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

require_absolute() {
    case "$2" in
        /*) ;;
        *) die "$EX_USAGE" "$1 must be an absolute path (got '$2'). Fix the init container environment." ;;
    esac
}

# One part of X.Y.Z: decimal digits without a leading zero, at most 9 of them (shell arithmetic stays exact, and
# a leading zero would be read as octal).
valid_part() {
    case "$1" in
        '' | *[!0-9]* | 0?*) return 1 ;;
    esac
    [ "${#1}" -le 9 ]
}

is_version() {
    case "$1" in
        *.*.*.*) return 1 ;;
        *.*.*) ;;
        *) return 1 ;;
    esac
    iv_rest=${1#*.}
    valid_part "${1%%.*}" && valid_part "${iv_rest%%.*}" && valid_part "${iv_rest#*.}"
}

# version_lt A B: A is older than B (both X.Y.Z, compared numerically part by part).
version_lt() {
    vl_a=$1
    vl_b=$2
    for _ in 1 2 3; do
        vl_pa=${vl_a%%.*}
        vl_pb=${vl_b%%.*}
        if [ "$vl_pa" -lt "$vl_pb" ]; then
            return 0
        fi
        if [ "$vl_pa" -gt "$vl_pb" ]; then
            return 1
        fi
        vl_a=${vl_a#*.}
        vl_b=${vl_b#*.}
    done
    return 1
}

# A symbolic link is never followed: refuse before anything opens it.
refuse_link() {
    if [ -L "$1" ]; then
        die "$EX_MARKER_UNTRUSTED" "$2 '$1' is a symbolic link. Nothing on the backup volume is followed through \
links: a planted link could point this check at another file or make it write elsewhere. Inspect it (who wrote \
the backup export?), replace it with the real file or directory, then restart the pod."
    fi
}

# Atomic write: temp file in the target directory, then rename over the target.
write_file() {
    wf_tmp=$(mktemp "$1.tmp.XXXXXX") || return 1
    if printf '%s\n' "$2" >"$wf_tmp" && chmod "$3" "$wf_tmp" && mv -f "$wf_tmp" "$1"; then
        return 0
    fi
    rm -f "$wf_tmp"
    return 1
}

sha256_of() {
    sha256sum "$1" | cut -d ' ' -f 1
}

size_of() {
    wc -c <"$1" | tr -d ' \t'
}

is_sqlite() {
    [ -f "$1" ] && [ -s "$1" ] && [ "$(head -c 15 "$1" 2>/dev/null || true)" = "SQLite format 3" ]
}

# --- inputs -------------------------------------------------------------------------------------------------
DB_PATH=${DB_PATH:-}
BACKUP_DIR=${BACKUP_DIR:-}
TO_VERSION=${TO_VERSION:-}
SCRATCH_DIR=${SCRATCH_DIR:-}
LITESTREAM_BIN=${LITESTREAM_BIN:-litestream}
BACKUP_KEY_FILE=${BACKUP_KEY_FILE:-}
MANIFEST_SCRIPT=${MANIFEST_SCRIPT:-}
if [ -n "$BACKUP_KEY_FILE" ]; then
    require_absolute BACKUP_KEY_FILE "$BACKUP_KEY_FILE"
    require_absolute MANIFEST_SCRIPT "$MANIFEST_SCRIPT"
fi

require_absolute DB_PATH "$DB_PATH"
require_absolute BACKUP_DIR "$BACKUP_DIR"
require_absolute SCRATCH_DIR "$SCRATCH_DIR"
BACKUP_DIR=${BACKUP_DIR%/}
SCRATCH_DIR=${SCRATCH_DIR%/}
[ -n "$BACKUP_DIR" ] || die "$EX_USAGE" "BACKUP_DIR must not be '/'. Point it at Headscale's own directory on \
the backup volume."
[ -n "$SCRATCH_DIR" ] || die "$EX_USAGE" "SCRATCH_DIR must not be '/'. Point it at a scratch (emptyDir) mount."
is_version "$TO_VERSION" || die "$EX_USAGE" "TO_VERSION must be a Headscale version X.Y.Z (got '$TO_VERSION'). \
Fix the init container environment (it comes from headscale.version)."
case "$SCRATCH_DIR" in
    *[!A-Za-z0-9._/-]*) die "$EX_USAGE" "SCRATCH_DIR may only hold letters, digits and . _ / - (got \
'$SCRATCH_DIR'): it becomes a file:// URL for Litestream, which would read other characters differently. Mount \
the scratch volume at a plain path." ;;
esac
[ -d "$SCRATCH_DIR" ] || die "$EX_USAGE" "The scratch directory SCRATCH_DIR='$SCRATCH_DIR' does not exist. Check \
the scratch (emptyDir) volume mount of the init container."
command -v "$LITESTREAM_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "The litestream executable '$LITESTREAM_BIN' was \
not found. Run this script in the litestream image or set LITESTREAM_BIN."
if [ -d "$DB_PATH" ]; then
    die "$EX_USAGE" "DB_PATH '$DB_PATH' is a directory. Fix the init container environment."
fi

MARKER="$BACKUP_DIR/headscale-version"
PRE_DIR="$BACKUP_DIR/pre-upgrade"
DB_NAME=$(basename "$DB_PATH")
STAMP=$(date -u +%Y%m%dT%H%M%SZ)

# --- backup directory and marker -----------------------------------------------------------------------------
refuse_link "$BACKUP_DIR" "The backup directory BACKUP_DIR"
if [ ! -d "$BACKUP_DIR" ] || [ ! -r "$BACKUP_DIR" ] || [ ! -x "$BACKUP_DIR" ]; then
    die "$EX_BACKUP_DIR_UNAVAILABLE" "The backup directory '$BACKUP_DIR' is missing or unreadable, so the Headscale \
version that last ran on this database is unknown. (The restore container creates it on a first start.) Check \
the NFS backup volume (mount, export, permissions), then restart the pod."
fi

FROM_VERSION=
if [ -e "$MARKER" ] || [ -L "$MARKER" ]; then
    refuse_link "$MARKER" "The version marker"
    if [ ! -f "$MARKER" ]; then
        die "$EX_MARKER_UNTRUSTED" "The version marker '$MARKER' is not a regular file. Inspect it (who wrote it?), \
move it aside, then restart the pod."
    fi
    MARKER_TEXT=$(cat "$MARKER") || die "$EX_BACKUP_DIR_UNAVAILABLE" "The version marker '$MARKER' exists but \
cannot be read. Check the NFS backup volume and its permissions, then restart the pod."
    # Surrounding whitespace only (a trailing newline, a CR from an editor): "0.2 8.0" stays malformed.
    MARKER_TEXT="${MARKER_TEXT#"${MARKER_TEXT%%[![:space:]]*}"}"
    MARKER_TEXT="${MARKER_TEXT%"${MARKER_TEXT##*[![:space:]]}"}"
    if ! is_version "$MARKER_TEXT"; then
        # Not shown: it is not a version, and could be anything.
        die "$EX_MARKER_UNTRUSTED" "The version marker '$MARKER' does not hold a Headscale version X.Y.Z. Inspect \
it (who wrote it?), write the version that last ran on this database into it (or move it aside to record \
$TO_VERSION without a snapshot), then restart the pod."
    fi
    FROM_VERSION=$MARKER_TEXT
fi

record_version() {
    write_file "$MARKER" "$TO_VERSION" 0644 || die "$EX_SNAPSHOT_WRITE" "Could not write the version marker \
'$MARKER'. Check that the NFS backup volume is mounted read-write and not full, then restart the pod."
}

# --- no database yet, or no earlier version known: record this one --------------------------------------------
if [ ! -f "$DB_PATH" ] || [ ! -s "$DB_PATH" ]; then
    record_version
    info "no local database '$DB_PATH' yet (Headscale creates it): recorded version $TO_VERSION in '$MARKER'."
    exit 0
fi

if [ -z "$FROM_VERSION" ]; then
    record_version
    info "no Headscale version recorded in '$MARKER' (a first start with pre-upgrade snapshots): recorded \
$TO_VERSION. No pre-upgrade snapshot was taken because no earlier version is recorded."
    exit 0
fi

if [ "$FROM_VERSION" = "$TO_VERSION" ]; then
    exit 0
fi

# --- downgrade: refuse --------------------------------------------------------------------------------------
if version_lt "$TO_VERSION" "$FROM_VERSION"; then
    BACK_DIR="$PRE_DIR/$TO_VERSION-$FROM_VERSION"
    if [ -f "$BACK_DIR/$SNAPSHOT_FILE" ] && [ ! -L "$BACK_DIR" ] && [ ! -L "$BACK_DIR/$SNAPSHOT_FILE" ]; then
        WAY_BACK="The snapshot taken just before the upgrade from $TO_VERSION to $FROM_VERSION exists: \
'$BACK_DIR/$SNAPSHOT_FILE' (anything written since that upgrade is not in it). To go back to it: 1. stop \
Headscale (scale its Deployment to 0); 2. on the backup volume, move '$BACKUP_DIR/replica' aside; 3. in the \
litestream image with the backup volume mounted, seed a new replica from a copy of the snapshot: cp \
'$BACK_DIR/$SNAPSHOT_FILE' /tmp/restore.sqlite && litestream replicate -once /tmp/restore.sqlite \
'file://$BACKUP_DIR/replica'; 4. if the data volume is persistent, also move '$DB_PATH' and its -wal and -shm \
aside; 5. write $TO_VERSION into '$MARKER'; 6. start Headscale $TO_VERSION (scale it back to 1): the restore \
container restores the snapshot."
    else
        WAY_BACK="There is no snapshot of the upgrade from $TO_VERSION to $FROM_VERSION ('$BACK_DIR/' does not \
exist), so the only way back to $TO_VERSION is a copy of the backup volume older than that upgrade."
    fi
    die "$EX_DOWNGRADE" "Downgrade refused: Headscale $TO_VERSION is about to start, but $FROM_VERSION last ran on \
this database (recorded in '$MARKER'). Headscale's database migrations are one-way: the database may already be \
migrated to $FROM_VERSION's schema, which $TO_VERSION does not know. Set headscale.version back to $FROM_VERSION \
and run pulumi up (see \"Upgrading Headscale\" in the README). $WAY_BACK"
fi

# --- upgrade: a verified snapshot before the new version migrates --------------------------------------------
SNAP_DIR="$PRE_DIR/$FROM_VERSION-$TO_VERSION"
info "upgrade $FROM_VERSION -> $TO_VERSION: taking a pre-upgrade snapshot of '$DB_PATH' to '$SNAP_DIR/'."

# 1. Copy the database (and its WAL/journal, never the -shm) into scratch; nothing writes it meanwhile.
WORK="$SCRATCH_DIR/pre-upgrade.work"
rm -rf "$WORK"
umask 077
mkdir -p "$WORK/db" "$WORK/out" || die "$EX_SCRATCH" "Could not create '$WORK' in the scratch directory. Check \
that SCRATCH_DIR is a writable volume, then restart the pod."
# The positional parameters hold the copied file names (the script takes no arguments).
set -- "$DB_NAME"
for suffix in -wal -journal; do
    if [ -f "$DB_PATH$suffix" ]; then
        set -- "$@" "$DB_NAME$suffix"
    fi
done
for name in "$@"; do
    cp "$(dirname "$DB_PATH")/$name" "$WORK/db/$name" || die "$EX_SCRATCH" "Could not copy '$name' of the local \
database into the scratch directory '$SCRATCH_DIR'. Check that the database is readable and that the scratch \
volume has room for up to three times the database and its WAL (raise its sizeLimit), then restart the pod."
done
SOURCE_SUMS=$(cd "$WORK/db" && sha256sum -- "$@") || die "$EX_SCRATCH" "Could not compute the digests of the \
database copies in '$WORK/db'. Check the scratch volume, then restart the pod."
if ! is_sqlite "$WORK/db/$DB_NAME"; then
    die "$EX_SNAPSHOT_INVALID" "The local database '$DB_PATH' is not an SQLite database (no SQLite header), so \
no snapshot can be taken and $TO_VERSION is not started on it. Inspect the data volume; restore the database from \
the backup if it is damaged, then restart the pod."
fi

# snapshot_mac SHA256: the MAC of this upgrade's snapshot with that digest (empty output without a key).
snapshot_mac() {
    [ -n "$BACKUP_KEY_FILE" ] || return 0
    KEY_FILE=$BACKUP_KEY_FILE APP=headscale TMPDIR=$SCRATCH_DIR \
        sh "$MANIFEST_SCRIPT" snapshot-mac "$FROM_VERSION" "$TO_VERSION" "$1"
}

print_ok() {
    po_bytes=$(size_of "$SNAP_DIR/$SNAPSHOT_FILE")
    po_sha=$(printf '%.12s' "$1")
    info "pre-upgrade snapshot ok: $FROM_VERSION -> $TO_VERSION path=$SNAP_DIR bytes=$po_bytes sha256=$po_sha"
}

# 2. A snapshot of this upgrade already there: reuse it if it is complete, intact and of this database.
refuse_link "$PRE_DIR" "The pre-upgrade directory"
refuse_link "$SNAP_DIR" "The snapshot directory"
if [ -e "$SNAP_DIR" ]; then
    REASON=
    if [ ! -d "$SNAP_DIR" ]; then
        REASON="it is not a directory"
    else
        for name in "$SNAPSHOT_FILE" "$SNAPSHOT_FILE.sha256" source.sha256; do
            if [ -z "$REASON" ] && { [ -L "$SNAP_DIR/$name" ] || [ ! -f "$SNAP_DIR/$name" ]; }; then
                REASON="it is incomplete (no regular file '$name')"
            fi
        done
    fi
    if [ -z "$REASON" ]; then
        RECORDED=$(cut -d ' ' -f 1 "$SNAP_DIR/$SNAPSHOT_FILE.sha256" 2>/dev/null || true)
        ACTUAL=$(sha256_of "$SNAP_DIR/$SNAPSHOT_FILE" 2>/dev/null || true)
        if [ -z "$ACTUAL" ] || [ "$ACTUAL" != "$RECORDED" ] || ! is_sqlite "$SNAP_DIR/$SNAPSHOT_FILE"; then
            REASON="its database does not match its recorded digest"
        elif [ "$(cat "$SNAP_DIR/source.sha256" 2>/dev/null || true)" != "$SOURCE_SUMS" ]; then
            REASON="it was taken from a different state of the local database"
        elif [ -n "$BACKUP_KEY_FILE" ] && { [ -L "$SNAP_DIR/$SNAPSHOT_FILE.hmac" ] ||
            [ "$(cat "$SNAP_DIR/$SNAPSHOT_FILE.hmac" 2>/dev/null || true)" != "$(snapshot_mac "$ACTUAL")" ]; }; then
            REASON="its MAC is missing or does not verify under the backup key"
        fi
    fi
    if [ -z "$REASON" ]; then
        info "reusing the verified snapshot '$SNAP_DIR/' of an earlier attempt of this upgrade (same local \
database, digest matches)."
        record_version
        print_ok "$ACTUAL"
        exit 0
    fi
    if [ -d "$SNAP_DIR" ] && [ ! -e "$SNAP_DIR/$SNAPSHOT_FILE" ] && [ ! -L "$SNAP_DIR/$SNAPSHOT_FILE" ]; then
        # Leftovers of an interrupted attempt that never produced a database: nothing worth keeping.
        rm -rf "$SNAP_DIR" || die "$EX_SNAPSHOT_WRITE" "Could not remove the incomplete snapshot directory \
'$SNAP_DIR'. Check that the NFS backup volume is mounted read-write, then restart the pod."
        info "removed the incomplete snapshot directory '$SNAP_DIR/' of an interrupted attempt."
    else
        ASIDE="$SNAP_DIR.replaced-$STAMP"
        mv "$SNAP_DIR" "$ASIDE" || die "$EX_SNAPSHOT_WRITE" "Could not move the existing snapshot directory \
'$SNAP_DIR' aside. Check that the NFS backup volume is mounted read-write, then restart the pod."
        info "moved the existing snapshot directory aside to '$ASIDE/' ($REASON); taking a new one."
    fi
fi

# 3. Verify with Litestream: one-shot replica of the copy, then a restore with SQLite's full integrity check.
if ! OUTPUT=$("$LITESTREAM_BIN" replicate -once "$WORK/db/$DB_NAME" "file://$WORK/replica" 2>&1); then
    printf '%s\n' "$OUTPUT" >&2
    die "$EX_SNAPSHOT_INVALID" "Litestream could not replicate the copy of the local database '$DB_PATH' (see \
its output above), so no verified snapshot exists and $TO_VERSION is not started on it. Unless that output shows \
the scratch volume ran out of space (then raise its sizeLimit), the database is damaged: restore it from the \
backup (or from an earlier pre-upgrade snapshot), or set headscale.version back to $FROM_VERSION, then restart \
the pod."
fi
# The copy is in the replica now (and in Litestream's local LTX copy beside it): drop both before the restore.
rm -rf "$WORK/db"
CHECKED="$WORK/out/$SNAPSHOT_FILE"
if ! OUTPUT=$("$LITESTREAM_BIN" restore -integrity-check full -o "$CHECKED" "file://$WORK/replica" 2>&1) \
    || ! is_sqlite "$CHECKED" || [ -s "$CHECKED-wal" ]; then
    printf '%s\n' "$OUTPUT" >&2
    die "$EX_SNAPSHOT_INVALID" "The snapshot of the local database '$DB_PATH' failed verification (Litestream's \
restore with SQLite's full integrity check, see its output above), so $TO_VERSION is not started on it and the \
version marker is unchanged. Unless that output shows the scratch volume ran out of space (then raise its \
sizeLimit), the database is damaged: restore it from the backup (or from an earlier pre-upgrade snapshot), or set \
headscale.version back to $FROM_VERSION, then restart the pod."
fi
SHA=$(sha256_of "$CHECKED")

# 4. Copy to the backup volume, check the copy, commit by renaming the complete directory into place.
write_failed() {
    die "$EX_SNAPSHOT_WRITE" "Could not write the pre-upgrade snapshot to '$1' ($2). No snapshot was committed and \
the version marker is unchanged. Check that the NFS backup volume is mounted read-write and has room, then restart \
the pod."
}
if [ ! -d "$PRE_DIR" ]; then
    mkdir "$PRE_DIR" || write_failed "$PRE_DIR" "cannot create the directory"
fi
STAGING="$PRE_DIR/.$FROM_VERSION-$TO_VERSION.partial"
rm -rf "$STAGING" || write_failed "$STAGING" "cannot remove the leftover of an interrupted attempt"
mkdir "$STAGING" || write_failed "$STAGING" "cannot create the directory"
cp "$CHECKED" "$STAGING/$SNAPSHOT_FILE" || write_failed "$STAGING" "copy failed"
[ "$(sha256_of "$STAGING/$SNAPSHOT_FILE")" = "$SHA" ] || write_failed "$STAGING" "the copy differs from the \
verified snapshot"
printf '%s  %s\n' "$SHA" "$SNAPSHOT_FILE" >"$STAGING/$SNAPSHOT_FILE.sha256" || write_failed "$STAGING" "digest"
printf '%s\n' "$SOURCE_SUMS" >"$STAGING/source.sha256" || write_failed "$STAGING" "source digests"
if [ -n "$BACKUP_KEY_FILE" ]; then
    MAC=$(snapshot_mac "$SHA") || die "$EX_SNAPSHOT_WRITE" "Could not compute the snapshot's MAC (see the message \
above: the backup key '$BACKUP_KEY_FILE' or the scratch volume). The version marker is unchanged; restart the pod."
    printf '%s\n' "$MAC" >"$STAGING/$SNAPSHOT_FILE.hmac" || write_failed "$STAGING" "MAC"
fi
if [ -e "$SNAP_DIR" ] || [ -L "$SNAP_DIR" ]; then
    write_failed "$SNAP_DIR" "it appeared while this ran"
fi
mv "$STAGING" "$SNAP_DIR" || write_failed "$SNAP_DIR" "rename failed"
STAGING=

# 5. Only now may the new version start: record it.
write_file "$MARKER" "$TO_VERSION" 0644 || die "$EX_SNAPSHOT_WRITE" "The pre-upgrade snapshot is in '$SNAP_DIR/', \
but the version marker '$MARKER' could not be written. Check that the NFS backup volume is mounted read-write and \
not full, then restart the pod (the snapshot is reused)."
print_ok "$SHA"
exit 0
