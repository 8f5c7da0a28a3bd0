#!/bin/sh
# Restore-before-serve init container for one SQLite application (Headscale or Headplane).
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh, busybox tools, no sqlite3.
# Decides, before the application starts, whether to serve the local database, restore it from the Litestream
# file replica on the NFS backup volume, first-start an empty one, or refuse. It fails closed: whenever a backup
# should exist but cannot be found or read, or belongs to another identity, the pod does not start, because a
# silent first start would overwrite the node registry on the next sync and a foreign Noise key disconnects
# every client.
#
# Environment:
#   DB_PATH            the application's SQLite file on its local volume (absolute)
#   BACKUP_DIR         this application's directory on the NFS backup volume (absolute; its parent must exist)
#   LITESTREAM_CONFIG  rendered litestream.yml; its file replica path is "$BACKUP_DIR/replica"
#   IDENTITY_FINGERPRINT  optional: the identity's fingerprint, 64 lowercase hex (the SHA-256 of the trimmed Noise
#                      key, what the program knows as identityFingerprint); the pods get this, never the key itself
#   IDENTITY_FILE      optional, instead of IDENTITY_FINGERPRINT: the Noise private key file ("privkey:" + 64 hex),
#                      hashed here; both unset/empty = no identity contract
#   REQUIRE_BACKUP     optional: "true" on a standby, which must never first-start
#   SERVED_FILE        optional: the served witness, a file holding "true" once this site has served (mounted from
#                      an optional ConfigMap that Pulumi writes after the application's first ready rollout), or
#                      "standby" (written by a standby: the tailnet has served, this site not yet, so no position was
#                      ever recorded here); unset or empty = no witness; set but absent = not served yet; any other
#                      content refuses (exit 2)
#   ALLOW_EMPTY_START  optional: the override after a real loss, today's UTC date (YYYY-MM-DD); see "Served witness"
#   BACKUP_KEY_FILE    optional: the tailnet's backup key (64 hex, the Secret headscale-backup-key); set = the replica
#                      is restored only once its signed manifest verifies (see "Authenticated backups"); unset/empty =
#                      no authentication (as before signing existed)
#   MANIFEST_FILE      with BACKUP_KEY_FILE: the manifest the signer sidecar writes (default "$BACKUP_DIR/replica.manifest")
#   MANIFEST_SCRIPT    with BACKUP_KEY_FILE: litestream-manifest.sh (default: manifest.sh beside this script)
#   MAX_REPLICA_AGE_SECONDS  optional, with BACKUP_KEY_FILE: refuse a manifest signed longer ago (exit 44)
#   ALLOW_STALE_RESTORE     optional: today's UTC date restores a manifest older than MAX_REPLICA_AGE_SECONDS (exit 44
#                      otherwise) on that date only
#   POSITION_WITNESS_FILE  optional, with BACKUP_KEY_FILE: the writer's last recorded position, "<16 hex txid>
#                      <epoch>" (the served witness's key `position`, copied there by the position recorder sidecar
#                      from what the signer signed); set but absent = nothing recorded yet; any other content refuses
#                      (exit 13). A replica signed below it is a rollback (exit 44)
#   ALLOW_ROLLBACK_RESTORE  optional: today's UTC date restores a replica signed below the recorded position (exit 44
#                      otherwise) on that date only, said loudly
#   ALLOW_UNSIGNED_RESTORE  optional: today's UTC date restores a replica without a manifest, or whose manifest another
#                      key signed (exits 40 and 41 otherwise), on that date only, unverified and said loudly: the upgrade
#                      that introduced signing and a key rotation (a tampered or truncated manifest is never overridden)
#   LITESTREAM_BIN     optional: litestream executable (default: litestream)
#
# Authenticated backups: the signer sidecar (litestream-sign.sh run) writes MANIFEST_FILE, an HMAC-SHA256 under the
# tailnet's backup key over the replica's LTX files (name, size, SHA-256), the signed position (txid) and the signing
# time. Before a byte is restored, the manifest is verified and every signed file is copied to "$DB_PATH.verified" and
# checked there; Litestream then restores from that copy, so a file swapped after the check is never read. Files the
# manifest does not list (the tail after the last signature) are not restored: the restore stops at the signed
# position. The manifest must be signed for the application BACKUP_DIR is named after (/backup/<app>), and the check
# runs as `/bin/sh MANIFEST_SCRIPT verify` (exit codes 40-46 are its own, passed on). The position is also recorded
# on the local volume ("$(dirname DB_PATH)/.backup-position") after a restore, and by the running pod in the served
# witness (POSITION_WITNESS_FILE, outside the export); a restore refuses a replica signed below the higher of the two
# (exit 44). After any restore, "$(dirname DB_PATH)/.litestream-catch-up" tells the
# Litestream sidecar's startup probe to hold the application until the replica has caught up
# (litestream-position.sh), which then removes it.
#
# "Local database exists" means DB_PATH is a non-empty file; then the database is never modified: the identity
# is checked against the backup's fingerprint and the local marker, and missing markers are recorded. Before a restore or a first start, leftovers that
# would corrupt or confuse the new database (a zero-length DB_PATH, -wal/-shm/-journal without their database,
# Litestream's metadata dir) are renamed to "<name>.orphaned-<UTC time>", never deleted. A restore goes to
# "$DB_PATH.restoring" and is renamed into place only once it checks out.
#
# Served witness: the markers live on the two volumes they protect, so losing both the local volume and the backup
# directory leaves nothing that says a backup should exist, and that looks exactly like a first start. The witness
# lives outside both (in the cluster's API, written by Pulumi once the application served): witness present + no
# database + no backup (no replica data, no marker) refuses (exit 24) instead of starting empty. The override is
# ALLOW_EMPTY_START set to today's UTC date, which the refusal prints: it allows that empty start on that date only,
# so a value left set by accident is inert from the next day on (and is reported, never silently used); an empty
# start under the override says so loudly and then records the markers like any first start.
#
# Markers (written to a temp file, then mv, so a crash never leaves half a marker):
#   with identity:    $BACKUP_DIR/identity.sha256 and $(dirname DB_PATH)/.backup-identity.sha256
#                     = sha256 hex of the key file content with surrounding whitespace trimmed
#   without identity: $BACKUP_DIR/.backup-initialised and $(dirname DB_PATH)/.backup-initialised = "initialised"
#
# Exit codes:
#    0  ok: serving the existing database, first start, or restored
#    2  bad invocation: missing/relative path variable, config unreadable or not covering DB_PATH, no litestream
#   10  IDENTITY_FILE is set but missing, unreadable or empty
#   11  identity fingerprint differs from the one recorded with the backup (or with the local database)
#   12  a replica exists but carries no identity fingerprint, so it cannot be matched to this identity
#   13  a marker (or BACKUP_DIR itself) is a symbolic link, or a marker (a position record) does not hold its value
#   14  IDENTITY_FINGERPRINT is set but is not 64 lowercase hex digits
#   20  BACKUP_DIR is missing or unreadable while a backup should exist (or unreadable with no local database)
#   21  a fingerprint/marker says a backup exists, but the replica holds no data
#   22  the replica data cannot be read (litestream cannot list it)
#   23  REQUIRE_BACKUP=true and there is no backup to restore
#   24  the served witness says this site has served, and there is neither a local database nor a backup
#   30  litestream restore failed, or produced no valid SQLite file
#   31  the local volume could not be prepared (markers, moving stale files aside)
#   40  (BACKUP_KEY_FILE) the replica has no manifest: not written by this tailnet's writers, or before signing began
#   41  (BACKUP_KEY_FILE) the manifest's MAC does not verify: written without this tailnet's key (planted, another tailnet)
#   42  (BACKUP_KEY_FILE) the manifest is truncated or malformed
#   43  (BACKUP_KEY_FILE) a replica file differs from its signed digest (swapped), a needed file is gone, or the manifest
#       is another application's
#   44  (BACKUP_KEY_FILE) the signed position is older than MAX_REPLICA_AGE_SECONDS, or below the local position record
#       or the position recorded in the served witness (rolled back)
#   45  (BACKUP_KEY_FILE) the backup key file is missing, unreadable or not 64 lowercase hex digits
#   46  (BACKUP_KEY_FILE) the replica or its verified copy cannot be read or written
#   47  (BACKUP_KEY_FILE) a signed file the restore needs is not a regular file, or reading it did not end in time
#
# Trust: whoever can write the backup export can plant a backup, so nothing read from it is followed or echoed
# blindly. A marker that is a symbolic link is refused, never read (a link to the mounted key file would otherwise
# be read as a "fingerprint"), and so is a BACKUP_DIR that is a link; a marker's content is only used (and shown)
# once it has the marker's exact form (64 lowercase hex, or "initialised").
#
# Never run with `set -x`: the key content passes through a shell variable. Messages print at most the first
# 12 hex digits of a fingerprint (a SHA-256 of the key: it reveals nothing about the key, and the full value sits
# world-readable in the markers anyway), never key material.
set -eu

PROG=litestream-restore
EX_USAGE=2
EX_IDENTITY_UNAVAILABLE=10
EX_IDENTITY_MISMATCH=11
EX_IDENTITY_UNRECORDED=12
EX_MARKER_UNTRUSTED=13
EX_BACKUP_DIR_UNAVAILABLE=20
EX_REPLICA_MISSING=21
EX_REPLICA_UNREADABLE=22
EX_BACKUP_REQUIRED=23
EX_SERVED_NO_BACKUP=24
EX_RESTORE_FAILED=30
EX_LOCAL_STATE=31
EX_FINGERPRINT_FORM=14
EX_UNSIGNED=40
EX_FORGED=41
EX_MANIFEST_MALFORMED=42
EX_TAMPERED=43
EX_STALE=44
EX_BACKUP_KEY=45
EX_VERIFY_IO=46
EX_NOT_REGULAR=47

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info

# die CODE MESSAGE: one paragraph saying what happened and what to do, then exit CODE.
die() {
    printf '%s: REFUSING TO START (exit %s): %s\n' "$PROG" "$1" "$2" >&2
    exit "$1"
}

# die_from_subshell STATUS CODE MESSAGE: a refusal (exit 13) inside $(...) already said why; keep its code.
die_from_subshell() {
    if [ "$1" -eq "$EX_MARKER_UNTRUSTED" ]; then
        exit "$1"
    fi
    die "$2" "$3"
}

short() {
    printf '%.12s' "$1"
}

require_absolute() {
    case "$2" in
        /*) ;;
        *) die "$EX_USAGE" "$1 must be an absolute path (got '$2'). Fix the init container environment." ;;
    esac
}

# Atomic write: temp file in the target directory, then rename over the target.
write_marker() {
    wm_tmp=$(mktemp "$1.tmp.XXXXXX") || return 1
    # A fingerprint is not a secret: keep it readable for operators comparing stacks.
    if printf '%s\n' "$2" >"$wm_tmp" && chmod 0644 "$wm_tmp" && mv -f "$wm_tmp" "$1"; then
        return 0
    fi
    rm -f "$wm_tmp"
    return 1
}

# A symbolic link is never followed: refuse before anything opens it.
refuse_link() {
    if [ -L "$1" ]; then
        die "$EX_MARKER_UNTRUSTED" "$2 '$1' is a symbolic link. Markers and the backup directory are never \
followed through links: a planted link could point the check at another file. Inspect it (who wrote the \
backup export?), replace it with the real file or directory, then restart the pod."
    fi
}

# read_marker PATH: the marker's value, refused (exit 13) unless it has the exact form MARKER_VALUE has.
read_marker() {
    refuse_link "$1" "The marker"
    rm_value=$(cat "$1") || return 1
    rm_value=$(printf '%s' "$rm_value" | tr -d ' \t\r\n')
    rm_ok=false
    if [ -n "$FINGERPRINT" ]; then
        case "$rm_value" in
            *[!0-9a-f]*) ;;
            *) if [ "${#rm_value}" -eq 64 ]; then rm_ok=true; fi ;;
        esac
    elif [ "$rm_value" = initialised ]; then
        rm_ok=true
    fi
    if [ "$rm_ok" = false ]; then
        # Its content is not shown: it is not a marker, and could be anything (even key material).
        die "$EX_MARKER_UNTRUSTED" "The marker '$1' does not hold a marker value (expected $MARKER_FORM). \
Inspect it (who wrote it?), restore the right value or move it aside, then restart the pod."
    fi
    printf '%s' "$rm_value"
}

# Move a stale file aside (never delete: it may be the only copy of something an operator wants to inspect).
move_aside() {
    if [ -e "$1" ] || [ -L "$1" ]; then
        ma_target="$1.orphaned-$STAMP"
        mv "$1" "$ma_target" || die "$EX_LOCAL_STATE" "Could not move stale '$1' aside to '$ma_target' on the \
local volume. Check that the volume is mounted read-write and not full, then restart the pod."
        info "moved stale '$1' aside to '$ma_target'."
    fi
}

# --- inputs -------------------------------------------------------------------------------------------------
DB_PATH=${DB_PATH:-}
BACKUP_DIR=${BACKUP_DIR:-}
LITESTREAM_CONFIG=${LITESTREAM_CONFIG:-}
IDENTITY_FILE=${IDENTITY_FILE:-}
IDENTITY_FINGERPRINT=${IDENTITY_FINGERPRINT:-}
BACKUP_KEY_FILE=${BACKUP_KEY_FILE:-}
MANIFEST_FILE=${MANIFEST_FILE:-}
MANIFEST_SCRIPT=${MANIFEST_SCRIPT:-$(dirname "$0")/manifest.sh}
MAX_REPLICA_AGE_SECONDS=${MAX_REPLICA_AGE_SECONDS:-}
ALLOW_STALE_RESTORE=${ALLOW_STALE_RESTORE:-}
ALLOW_UNSIGNED_RESTORE=${ALLOW_UNSIGNED_RESTORE:-}
ALLOW_ROLLBACK_RESTORE=${ALLOW_ROLLBACK_RESTORE:-}
POSITION_WITNESS_FILE=${POSITION_WITNESS_FILE:-}
REQUIRE_BACKUP=${REQUIRE_BACKUP:-}
SERVED_FILE=${SERVED_FILE:-}
ALLOW_EMPTY_START=${ALLOW_EMPTY_START:-}
LITESTREAM_BIN=${LITESTREAM_BIN:-litestream}

require_absolute DB_PATH "$DB_PATH"
require_absolute BACKUP_DIR "$BACKUP_DIR"
require_absolute LITESTREAM_CONFIG "$LITESTREAM_CONFIG"
BACKUP_DIR=${BACKUP_DIR%/}
[ -n "$BACKUP_DIR" ] || die "$EX_USAGE" "BACKUP_DIR must not be '/'. Point it at this application's own \
directory on the backup volume."
case "$REQUIRE_BACKUP" in
    true) REQUIRE_BACKUP=true ;;
    '' | false) REQUIRE_BACKUP=false ;;
    *) die "$EX_USAGE" "REQUIRE_BACKUP must be 'true', 'false' or empty (got '$REQUIRE_BACKUP')." ;;
esac
# The witness file comes from an optional ConfigMap volume: the kubelet mounts an empty directory while the
# ConfigMap does not exist, and the key's file (a link into the volume's ..data, so links are followed here) once
# it does. A missing directory means the mount itself is broken: that is refused, never read as "not served".
SERVED_BEFORE=false
SERVED_HERE=false
if [ -n "$SERVED_FILE" ]; then
    require_absolute SERVED_FILE "$SERVED_FILE"
    [ -d "$(dirname "$SERVED_FILE")" ] || die "$EX_USAGE" "The directory of the served witness SERVED_FILE='$SERVED_FILE' \
does not exist. Check the witness volume mount of the init container."
    if [ -e "$SERVED_FILE" ]; then
        if ! SERVED_VALUE=$(cat "$SERVED_FILE" 2>/dev/null); then
            die "$EX_USAGE" "The served witness '$SERVED_FILE' exists but cannot be read. Check the witness volume \
mount of the init container."
        fi
        SERVED_VALUE=$(printf '%s' "$SERVED_VALUE" | tr -d ' \t\r\n')
        case "$SERVED_VALUE" in
            true) SERVED_HERE=true ;;
            standby) ;;
            # Not shown: only Pulumi writes it, and anything else in it is not a witness.
            *) die "$EX_USAGE" "The served witness '$SERVED_FILE' holds neither 'true' nor 'standby'. It is written by \
Pulumi once the application has served; restore its ConfigMap with \`pulumi up\`, then restart the pod." ;;
        esac
        SERVED_BEFORE=true
    fi
fi
TODAY=$(date -u +%Y-%m-%d)
MANIFEST_FILE=${MANIFEST_FILE:-$BACKUP_DIR/replica.manifest}
REPLICA_DIR="$BACKUP_DIR/replica"
# The application the manifest must be signed for: the backup directory is named after it (/backup/<app>).
VERIFY_APP=${BACKUP_DIR##*/}
if [ -n "$BACKUP_KEY_FILE" ]; then
    require_absolute BACKUP_KEY_FILE "$BACKUP_KEY_FILE"
    require_absolute MANIFEST_FILE "$MANIFEST_FILE"
    [ -f "$MANIFEST_SCRIPT" ] || die "$EX_USAGE" "The manifest script MANIFEST_SCRIPT='$MANIFEST_SCRIPT' is missing. \
Check the ConfigMap volume mount of the init container."
    case "$MAX_REPLICA_AGE_SECONDS" in
        '') ;;
        *[!0-9]* | 0*) die "$EX_USAGE" "MAX_REPLICA_AGE_SECONDS must be a positive whole number of seconds (got \
'$MAX_REPLICA_AGE_SECONDS')." ;;
    esac
fi
[ -z "$POSITION_WITNESS_FILE" ] || require_absolute POSITION_WITNESS_FILE "$POSITION_WITNESS_FILE"
case "$ALLOW_ROLLBACK_RESTORE" in
    '' | [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]) ;;
    *) die "$EX_USAGE" "ALLOW_ROLLBACK_RESTORE must be empty or a UTC date YYYY-MM-DD (got '$ALLOW_ROLLBACK_RESTORE')." ;;
esac
case "$ALLOW_UNSIGNED_RESTORE" in
    '' | [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]) ;;
    *) die "$EX_USAGE" "ALLOW_UNSIGNED_RESTORE must be empty or a UTC date YYYY-MM-DD (got '$ALLOW_UNSIGNED_RESTORE')." ;;
esac
case "$ALLOW_EMPTY_START" in
    '') ;;
    [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9])
        if [ "$ALLOW_EMPTY_START" = "$TODAY" ]; then
            info "warning: ALLOW_EMPTY_START=$ALLOW_EMPTY_START (today, UTC) is set: if this site has served and both \
its database and its backup are gone, it starts EMPTY. Remove the override (headscale.allowEmptyStart) once the pod \
has started."
        else
            info "warning: ALLOW_EMPTY_START=$ALLOW_EMPTY_START is not today's date ($TODAY, UTC), so it has no effect. \
Remove the override (headscale.allowEmptyStart) from the stack config."
        fi
        ;;
    *) die "$EX_USAGE" "ALLOW_EMPTY_START must be empty or a UTC date YYYY-MM-DD (got '$ALLOW_EMPTY_START')." ;;
esac
command -v "$LITESTREAM_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "The litestream executable '$LITESTREAM_BIN' was \
not found. Run this script in the litestream image or set LITESTREAM_BIN."
if [ ! -f "$LITESTREAM_CONFIG" ] || [ ! -r "$LITESTREAM_CONFIG" ]; then
    die "$EX_USAGE" "The Litestream config '$LITESTREAM_CONFIG' is missing or unreadable. Check the ConfigMap \
volume mount of the init container."
fi
if ! DATABASES=$("$LITESTREAM_BIN" databases -json -config "$LITESTREAM_CONFIG" 2>&1); then
    die "$EX_USAGE" "Litestream rejected the config '$LITESTREAM_CONFIG' ($DATABASES). Fix the rendered config."
fi
case "$DATABASES" in
    *"\"path\": \"$DB_PATH\""*) ;;
    *) die "$EX_USAGE" "The Litestream config '$LITESTREAM_CONFIG' does not replicate DB_PATH '$DB_PATH'. The \
config and the init container environment must name the same database file." ;;
esac

DB_DIR=$(dirname "$DB_PATH")
DB_NAME=$(basename "$DB_PATH")
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
QUARANTINE_DIR="$BACKUP_DIR/quarantine/$STAMP"

# hex_gt A B: whether the 16-hex-digit TXID A is above B as unsigned 64-bit numbers, compared as two 32-bit halves
# (shell arithmetic is signed: $((0x8000000000000000)) is negative).
hex_gt() {
    hg_a=$((0x${1%????????}))
    hg_b=$((0x${2%????????}))
    if [ "$hg_a" -ne "$hg_b" ]; then
        [ "$hg_a" -gt "$hg_b" ]
        return
    fi
    [ $((0x${1#????????})) -gt $((0x${2#????????})) ]
}

# quarantine_beyond_local: on a kept database, move every level-0 entry of the replica above Litestream's newest
# local level-0 file into QUARANTINE_DIR. This single writer writes each level-0 file locally before it ships it, so
# nothing it wrote lies above its own newest; a file there was planted, and Litestream would fetch it as its baseline
# at start ("database behind replica"). Nothing is moved without a local position to compare with.
quarantine_beyond_local() {
    bl_local="$DB_DIR/.$DB_NAME-litestream/ltx/0"
    bl_newest=
    for bl_file in "$bl_local"/*.ltx; do
        [ -f "$bl_file" ] && bl_newest=${bl_file##*/}
    done
    [ -n "$bl_newest" ] || return 0
    bl_top=${bl_newest#*-}
    bl_top=${bl_top%.ltx}
    for bl_file in "$REPLICA_DIR"/ltx/0/*.ltx; do
        [ -e "$bl_file" ] || [ -L "$bl_file" ] || continue
        bl_max=${bl_file##*-}
        bl_max=${bl_max%.ltx}
        case "$bl_max" in *[!0-9a-f]*) continue ;; esac
        [ "${#bl_max}" -eq 16 ] || continue
        hex_gt "$bl_max" "$bl_top" || continue
        if mkdir -p "$QUARANTINE_DIR/ltx/0" && mv -f "$bl_file" "$QUARANTINE_DIR/ltx/0/"; then
            info "warning: moved '$bl_file' aside to '$QUARANTINE_DIR/ltx/0': it lies above this database's newest \
position ($bl_top), so this writer did not write it (planted?); Litestream would take it as its baseline."
        else
            info "warning: could not move '$bl_file' (above this database's newest position $bl_top) aside."
        fi
    done
}
[ -d "$DB_DIR" ] || die "$EX_LOCAL_STATE" "The database directory '$DB_DIR' does not exist. Check the data \
volume mount of the init container."

# --- identity ------------------------------------------------------------------------------------------------
if [ -n "$IDENTITY_FINGERPRINT" ]; then
    case "$IDENTITY_FINGERPRINT" in
        *[!0-9a-f]*) FP_OK=false ;;
        *) if [ "${#IDENTITY_FINGERPRINT}" -eq 64 ]; then FP_OK=true; else FP_OK=false; fi ;;
    esac
    [ "$FP_OK" = true ] || die "$EX_FINGERPRINT_FORM" "IDENTITY_FINGERPRINT is not 64 lowercase hex digits (the \
SHA-256 of the Noise key, the stack output identityFingerprint). Fix the init container environment."
    BACKUP_MARKER="$BACKUP_DIR/identity.sha256"
    LOCAL_MARKER="$DB_DIR/.backup-identity.sha256"
    FINGERPRINT=$IDENTITY_FINGERPRINT
    MARKER_VALUE=$FINGERPRINT
    MARKER_FORM="the SHA-256 of the identity key, 64 lowercase hex digits"
elif [ -n "$IDENTITY_FILE" ]; then
    BACKUP_MARKER="$BACKUP_DIR/identity.sha256"
    LOCAL_MARKER="$DB_DIR/.backup-identity.sha256"
    if [ ! -f "$IDENTITY_FILE" ] || [ ! -r "$IDENTITY_FILE" ] || ! KEY=$(cat "$IDENTITY_FILE" 2>/dev/null); then
        die "$EX_IDENTITY_UNAVAILABLE" "The identity key file IDENTITY_FILE='$IDENTITY_FILE' is missing or \
unreadable. Without it the application would generate a new Noise key and every client would be disconnected. \
Restore the identity Secret (from the stack that wrote the backup in '$BACKUP_DIR') and check its volume mount."
    fi
    # Trim surrounding whitespace (like Python's str.strip() for ASCII whitespace).
    KEY="${KEY#"${KEY%%[![:space:]]*}"}"
    KEY="${KEY%"${KEY##*[![:space:]]}"}"
    if [ -z "$KEY" ]; then
        die "$EX_IDENTITY_UNAVAILABLE" "The identity key file IDENTITY_FILE='$IDENTITY_FILE' is empty. Restore \
the identity Secret (from the stack that wrote the backup in '$BACKUP_DIR') and check its volume mount."
    fi
    # printf is a shell builtin: the key never appears in any process's argv.
    FINGERPRINT=$(printf '%s' "$KEY" | sha256sum | cut -d ' ' -f 1)
    KEY=
    MARKER_VALUE=$FINGERPRINT
    MARKER_FORM="the SHA-256 of the identity key, 64 lowercase hex digits"
else
    BACKUP_MARKER="$BACKUP_DIR/.backup-initialised"
    LOCAL_MARKER="$DB_DIR/.backup-initialised"
    FINGERPRINT=
    MARKER_VALUE=initialised
    MARKER_FORM="the word 'initialised'"
fi

identity_mismatch() {
    die "$EX_IDENTITY_MISMATCH" "The identity key fingerprint $(short "$FINGERPRINT")... does not match the one \
recorded in $1 ($(short "$2")...). Serving that database with another Noise key would disconnect every client. \
Restore the identity Secret from the stack that wrote the backup, or, if this key is meant to start a new \
tailnet, move '$BACKUP_DIR' aside and delete the database and '$LOCAL_MARKER'."
}

# --- backup directory state ----------------------------------------------------------------------------------
# BACKUP_STATE: ok | missing | unreadable
refuse_link "$BACKUP_DIR" "The backup directory BACKUP_DIR"
if [ -d "$BACKUP_DIR" ]; then
    if [ -r "$BACKUP_DIR" ] && [ -x "$BACKUP_DIR" ] && ls "$BACKUP_DIR" >/dev/null 2>&1; then
        BACKUP_STATE=ok
    else
        BACKUP_STATE=unreadable
    fi
elif [ -e "$BACKUP_DIR" ] || [ -L "$BACKUP_DIR" ]; then
    BACKUP_STATE=unreadable
else
    BACKUP_STATE=missing
fi

BACKUP_FP=
HAVE_BACKUP_MARKER=false
if [ "$BACKUP_STATE" = ok ] && { [ -e "$BACKUP_MARKER" ] || [ -L "$BACKUP_MARKER" ]; }; then
    refuse_link "$BACKUP_MARKER" "The backup marker"
    BACKUP_FP=$(read_marker "$BACKUP_MARKER") || die_from_subshell $? "$EX_BACKUP_DIR_UNAVAILABLE" "The backup \
marker '$BACKUP_MARKER' exists but cannot be read. Check the NFS backup volume and its permissions."
    HAVE_BACKUP_MARKER=true
fi
LOCAL_FP=
HAVE_LOCAL_MARKER=false
if [ -e "$LOCAL_MARKER" ] || [ -L "$LOCAL_MARKER" ]; then
    refuse_link "$LOCAL_MARKER" "The local marker"
    LOCAL_FP=$(read_marker "$LOCAL_MARKER") || die_from_subshell $? "$EX_LOCAL_STATE" "The local marker \
'$LOCAL_MARKER' exists but cannot be read. Check the data volume."
    HAVE_LOCAL_MARKER=true
fi

write_local_marker() {
    write_marker "$LOCAL_MARKER" "$MARKER_VALUE"
}

write_backup_marker() {
    if [ ! -d "$BACKUP_DIR" ]; then
        mkdir "$BACKUP_DIR" || return 1
    fi
    write_marker "$BACKUP_MARKER" "$MARKER_VALUE"
}

# --- a. a local database exists: serve it, never touch it ----------------------------------------------------
if [ -f "$DB_PATH" ] && [ -s "$DB_PATH" ]; then
    if [ -n "$FINGERPRINT" ]; then
        if [ "$HAVE_BACKUP_MARKER" = true ] && [ "$BACKUP_FP" != "$FINGERPRINT" ]; then
            identity_mismatch "the backup '$BACKUP_MARKER'" "$BACKUP_FP"
        fi
        if [ "$HAVE_LOCAL_MARKER" = true ] && [ "$LOCAL_FP" != "$FINGERPRINT" ]; then
            identity_mismatch "the local marker '$LOCAL_MARKER'" "$LOCAL_FP"
        fi
    fi
    if [ "$HAVE_LOCAL_MARKER" = false ] && ! write_local_marker; then
        info "warning: could not write the local marker '$LOCAL_MARKER'; continuing."
    fi
    case "$BACKUP_STATE" in
        ok | missing)
            if [ "$HAVE_BACKUP_MARKER" = false ] && ! write_backup_marker; then
                info "warning: could not record the backup marker '$BACKUP_MARKER'; continuing."
            fi
            ;;
        unreadable)
            info "warning: the backup directory '$BACKUP_DIR' is unreadable; replication will fail until the \
NFS backup volume is fixed."
            ;;
    esac
    if [ "$BACKUP_STATE" = ok ]; then
        quarantine_beyond_local
    fi
    info "serving existing database '$DB_PATH' (left untouched)."
    exit 0
fi

# From here on there is no usable local database.
if [ -d "$DB_PATH" ]; then
    die "$EX_LOCAL_STATE" "DB_PATH '$DB_PATH' is a directory. Move it away and restart the pod."
fi

if [ "$BACKUP_STATE" = unreadable ]; then
    die "$EX_BACKUP_DIR_UNAVAILABLE" "There is no local database and the backup directory '$BACKUP_DIR' cannot \
be read, so it is impossible to tell whether a backup exists. Not starting empty. Fix the NFS backup volume \
(mount, export, permissions) and restart the pod."
fi

BACKUP_EXPECTED_BY=
if [ "$HAVE_BACKUP_MARKER" = true ]; then
    BACKUP_EXPECTED_BY="'$BACKUP_MARKER'"
elif [ "$HAVE_LOCAL_MARKER" = true ]; then
    BACKUP_EXPECTED_BY="the local marker '$LOCAL_MARKER'"
fi

if [ "$BACKUP_STATE" = missing ] && [ -n "$BACKUP_EXPECTED_BY" ]; then
    die "$EX_BACKUP_DIR_UNAVAILABLE" "There is no local database, $BACKUP_EXPECTED_BY says a backup was made, \
but the backup directory '$BACKUP_DIR' does not exist. Not starting empty over a lost backup. Restore \
'$BACKUP_DIR' on the NFS backup volume (or mount the right one); if the data is knowingly gone, delete \
'$LOCAL_MARKER' to allow a first start."
fi

# --- replica state (litestream is the authority on its own layout) --------------------------------------------
REPLICA_FILES=0
SIGNED_REPLICA=false
if [ "$BACKUP_STATE" = ok ] && [ -n "$BACKUP_KEY_FILE" ] && { [ -e "$MANIFEST_FILE" ] || [ -L "$MANIFEST_FILE" ]; }; then
    # A manifest stands for a replica: the verification reads what it signed and refuses what is gone or cannot be
    # read (so a replica emptied under its manifest is refused, never taken for a first start), and one Litestream
    # listing of the export is saved on every restore.
    SIGNED_REPLICA=true
elif [ "$BACKUP_STATE" = ok ]; then
    if ! LTX=$("$LITESTREAM_BIN" ltx -json -level all -config "$LITESTREAM_CONFIG" "$DB_PATH" 2>&1); then
        die "$EX_REPLICA_UNREADABLE" "The Litestream replica under '$BACKUP_DIR' cannot be read ($LTX). Not \
starting empty over a backup that may exist. Fix the NFS backup volume or the replica files and restart the pod."
    fi
    # One JSON object (with a quoted "min_txid" key) per LTX file; log lines never contain that quoted key.
    REPLICA_FILES=$(printf '%s\n' "$LTX" | grep -c '"min_txid"' || true)
fi

remove_restore_tmp() {
    rm -f "$RESTORE_TMP" "$RESTORE_TMP.tmp" "$RESTORE_TMP-wal" "$RESTORE_TMP-shm" "$DB_DIR/.backup-signed.tmp" \
        "$DB_DIR/.backup-baseline.tmp"
    rm -rf "$VERIFIED_DIR"
}

POSITION_RECORD="$DB_DIR/.backup-position"
# What the restore verified ("<level> <name> <sha256>"): the signer sidecar carries it as this writer's own.
BASELINE="$DB_DIR/.backup-baseline"

# quarantine_unsigned SIGNED_LIST POSITION: move every entry at an LTX name that the manifest does not list and that
# ends above POSITION out of the replica, into QUARANTINE_DIR (never deleted): Litestream takes the replica's
# position from the highest level-0 name, so a planted file above the restored position would make it skip (or
# refuse) what the restored database writes next.
quarantine_unsigned() {
    qu_moved=0
    for qu_file in "$REPLICA_DIR"/ltx/[0-9]/*.ltx; do
        [ -e "$qu_file" ] || [ -L "$qu_file" ] || continue
        qu_name=${qu_file##*/}
        qu_level=${qu_file%/*}
        qu_level=${qu_level##*/}
        qu_max=${qu_name#*-}
        qu_max=${qu_max%.ltx}
        case "$qu_max" in *[!0-9a-f]*) continue ;; esac
        [ "${#qu_max}" -eq 16 ] || continue
        if grep -qx "$qu_level $qu_name" "$1" || ! hex_gt "$qu_max" "$2"; then
            continue
        fi
        if ! { mkdir -p "$QUARANTINE_DIR/ltx/$qu_level" && mv -f "$qu_file" "$QUARANTINE_DIR/ltx/$qu_level/$qu_name"; }
        then
            die "$EX_LOCAL_STATE" "Could not move the unsigned replica file '$qu_file' aside to '$QUARANTINE_DIR': \
Litestream would take it as the replica's position. Check that the NFS backup volume is writable, then restart the pod."
        fi
        qu_moved=$((qu_moved + 1))
    done
    if [ "$qu_moved" -gt 0 ]; then
        info "warning: moved $qu_moved unsigned replica file(s) above the signed position txid $2 aside to \
'$QUARANTINE_DIR' (a tail written after the last signature, or planted): Litestream continues from txid $2. Inspect \
them; delete the directory once you know who wrote them."
    fi
}
VERIFIED_DIR="$DB_PATH.verified"

# witness_position: the txid of the served witness's recorded position ("<16 hex> <epoch>", as the kubelet writes a
# ConfigMap value: without a final newline), empty when none.
witness_position() {
    WITNESS_TXID=
    [ -n "$POSITION_WITNESS_FILE" ] || return 0
    if [ ! -e "$POSITION_WITNESS_FILE" ]; then
        if [ "$SERVED_HERE" != true ]; then
            info "no position recorded in the served witness yet ('$POSITION_WITNESS_FILE'): this site has not \
served (a standby's witness, or none); the replica's signed age is checked alone."
            return 0
        fi
        # Served, but nothing recorded: the recorder never could (a 403, the API unreachable), or the key was removed.
        if [ "$ALLOW_ROLLBACK_RESTORE" != "$TODAY" ]; then
            die "$EX_STALE" "This site has served (the served witness says so), but no replica position was ever \
recorded in it ('$POSITION_WITNESS_FILE' is absent): the position recorder could not write it (see the alert \
PositionNotRecorded and the position-recorder container's log), or the key was removed. Without it a rolled-back \
replica cannot be told from the newest one. Fix the recorder (its Role, the API server's reachability: \
networkPolicy.apiServerCidrs); to restore this replica anyway, after checking it is the newest copy, set \
backup.auth.allowRollback to today's UTC date ($TODAY) and run pulumi up, then remove it."
        fi
        info "WARNING: ALLOW_ROLLBACK_RESTORE=$ALLOW_ROLLBACK_RESTORE (today): this site has served but the served \
witness holds no recorded position, so nothing outside the export says how far the replica got; restoring on the \
signature's age alone. Remove backup.auth.allowRollback once the pod has started and the recorder has recorded."
        return 0
    fi
    wp_value=
    if ! IFS= read -r wp_value <"$POSITION_WITNESS_FILE" && [ -z "$wp_value" ]; then
        wp_value=
    fi
    wp_txid=${wp_value%% *}
    wp_at=${wp_value#* }
    case "$wp_at" in
        '' | *[!0-9]*) wp_txid= ;;
    esac
    if [ "$wp_txid" = "$wp_value" ] || ! is_position "$wp_txid"; then
        # Not shown: only the recorder writes it.
        die "$EX_MARKER_UNTRUSTED" "The served witness's recorded position '$POSITION_WITNESS_FILE' does not hold a \
position ('<16 hex digits> <seconds>'). It is written by the position recorder sidecar; inspect the ConfigMap's key \
'position', delete that key if it is damaged (the next record writes it again), then restart the pod."
    fi
    WITNESS_TXID=$wp_txid
}

is_position() {
    case "$1" in
        *[!0-9a-f]*) return 1 ;;
    esac
    [ "${#1}" -eq 16 ]
}

# verify_replica: check the signed manifest and copy the signed files to VERIFIED_DIR; sets RESTORE_SOURCE (the
# verified copy's URL, or the config's replica under the unsigned override) and SIGNED_TXID. Refuses otherwise.
verify_replica() {
    vr_min=
    vr_source=
    if [ -e "$POSITION_RECORD" ] || [ -L "$POSITION_RECORD" ]; then
        refuse_link "$POSITION_RECORD" "The local position record"
        vr_min=$(tr -d ' \t\r\n' <"$POSITION_RECORD" 2>/dev/null || true)
        is_position "$vr_min" || vr_min=
        if [ -z "$vr_min" ]; then
            die "$EX_MARKER_UNTRUSTED" "The local position record '$POSITION_RECORD' does not hold a position (16 hex \
digits). Inspect it, move it aside if it is damaged, then restart the pod."
        fi
        vr_source="the local position record '$POSITION_RECORD'"
    fi
    witness_position
    if [ -n "$WITNESS_TXID" ] && { [ -z "$vr_min" ] || hex_gt "$WITNESS_TXID" "$vr_min"; }; then
        vr_min=$WITNESS_TXID
        vr_source="the position the running pod recorded in the served witness '$POSITION_WITNESS_FILE'"
    fi
    case "$DB_DIR" in
        *[!A-Za-z0-9._/-]*) die "$EX_USAGE" "The database directory '$DB_DIR' must be a plain path (letters, digits, \
'.', '_', '-', '/'): the verified copy is restored through a file:// URL." ;;
    esac
    rm -rf "$VERIFIED_DIR"
    vr_status=0
    vr_out=$(KEY_FILE=$BACKUP_KEY_FILE APP=$VERIFY_APP REPLICA_DIR=$REPLICA_DIR MANIFEST_FILE=$MANIFEST_FILE \
        COPY_DIR=$VERIFIED_DIR MAX_AGE_SECONDS=$MAX_REPLICA_AGE_SECONDS ALLOW_STALE=$ALLOW_STALE_RESTORE \
        MIN_TXID=$vr_min MIN_TXID_SOURCE=$vr_source ALLOW_ROLLBACK=$ALLOW_ROLLBACK_RESTORE \
        /bin/sh "$MANIFEST_SCRIPT" verify) || vr_status=$?
    case "$vr_status" in
        0)
            SIGNED_TXID=${vr_out#txid=}
            SIGNED_TXID=${SIGNED_TXID%% *}
            RESTORE_SOURCE="file://$VERIFIED_DIR"
            info "the replica's manifest verified ($vr_out)."
            if ! { mv -f "$VERIFIED_DIR/signed" "$DB_DIR/.backup-signed.tmp" &&
                mv -f "$VERIFIED_DIR/baseline" "$BASELINE.tmp"; }; then
                die "$EX_LOCAL_STATE" "Could not keep the verified file list on the local volume '$DB_DIR'. Check \
that the data volume is writable, then restart the pod."
            fi
            ;;
        "$EX_UNSIGNED" | "$EX_FORGED")
            rm -rf "$VERIFIED_DIR"
            if [ "$ALLOW_UNSIGNED_RESTORE" != "$TODAY" ]; then
                exit "$vr_status"
            fi
            info "!!! OVERRIDE: ALLOW_UNSIGNED_RESTORE=$ALLOW_UNSIGNED_RESTORE (today): restoring the replica in \
'$BACKUP_DIR' WITHOUT a valid signature (exit $vr_status above). The signer signs it from now on. Remove \
backup.auth.allowUnsigned from the stack config now."
            SIGNED_TXID=
            RESTORE_SOURCE=
            ;;
        "$EX_MANIFEST_MALFORMED" | "$EX_TAMPERED" | "$EX_STALE" | "$EX_BACKUP_KEY" | "$EX_VERIFY_IO" | "$EX_NOT_REGULAR" | \
            "$EX_USAGE")
            # The manifest script said why (stderr); its code is this script's.
            rm -rf "$VERIFIED_DIR"
            exit "$vr_status"
            ;;
        *)
            rm -rf "$VERIFIED_DIR"
            die "$EX_VERIFY_IO" "The manifest check '$MANIFEST_SCRIPT' ended with status $vr_status, which it does not \
document (killed? out of memory?). Restart the pod to retry."
            ;;
    esac
}

move_stale_local_files() {
    # A zero-length DB file, a WAL/SHM/journal without its database, or Litestream's metadata for a database
    # that is gone would be applied to (or confuse) the new database: SQLite replays a stale WAL onto it.
    move_aside "$DB_PATH"
    move_aside "$DB_PATH-wal"
    move_aside "$DB_PATH-shm"
    move_aside "$DB_PATH-journal"
    move_aside "$DB_DIR/.$DB_NAME-litestream"
}

if [ "$SIGNED_REPLICA" = true ] || [ "$REPLICA_FILES" -gt 0 ]; then
    # --- c/d. a backup exists: restore it if it belongs to this identity ---------------------------------------
    if [ -n "$FINGERPRINT" ]; then
        if [ "$HAVE_BACKUP_MARKER" = false ]; then
            die "$EX_IDENTITY_UNRECORDED" "A replica exists in '$BACKUP_DIR' but has no identity fingerprint \
'$BACKUP_MARKER', so it cannot be matched to this identity key. Restore the identity Secret from the stack that \
wrote the backup and write the sha256 of its trimmed key content to '$BACKUP_MARKER', or move '$BACKUP_DIR' aside \
to start empty."
        fi
        if [ "$BACKUP_FP" != "$FINGERPRINT" ]; then
            identity_mismatch "the backup '$BACKUP_MARKER'" "$BACKUP_FP"
        fi
    fi
    # Restore next to the database, then rename: an interrupted restore never leaves a partial DB_PATH that the
    # next run would take for an existing database (case a). litestream itself also writes "<output>.tmp".
    RESTORE_TMP="$DB_PATH.restoring"
    remove_restore_tmp
    RESTORE_SOURCE=
    SIGNED_TXID=
    if [ -n "$BACKUP_KEY_FILE" ]; then
        verify_replica
    fi
    move_stale_local_files
    if [ "$SIGNED_REPLICA" = true ]; then
        info "restoring '$DB_PATH' from the verified copy of the replica in '$BACKUP_DIR'."
    else
        info "restoring '$DB_PATH' from the Litestream replica in '$BACKUP_DIR' ($REPLICA_FILES LTX files)."
    fi
    if [ -n "$RESTORE_SOURCE" ]; then
        set -- restore -integrity-check full -o "$RESTORE_TMP" "$RESTORE_SOURCE"
    else
        set -- restore -config "$LITESTREAM_CONFIG" -if-replica-exists -integrity-check full -o "$RESTORE_TMP" "$DB_PATH"
    fi
    if ! "$LITESTREAM_BIN" "$@" >&2; then
        remove_restore_tmp
        die "$EX_RESTORE_FAILED" "litestream restore from '$BACKUP_DIR' failed (see its output above). The local \
database was not created. Check the replica files on the NFS backup volume; restore '$BACKUP_DIR' from an older \
copy if they are damaged, then restart the pod."
    fi
    HEADER=$(head -c 15 "$RESTORE_TMP" 2>/dev/null || true)
    if [ ! -s "$RESTORE_TMP" ] || [ "$HEADER" != "SQLite format 3" ]; then
        remove_restore_tmp
        die "$EX_RESTORE_FAILED" "litestream restore from '$BACKUP_DIR' did not produce a non-empty SQLite \
database. Check the replica files on the NFS backup volume; restore '$BACKUP_DIR' from an older copy if they \
are damaged, then restart the pod."
    fi
    if [ -e "$RESTORE_TMP-wal" ]; then
        remove_restore_tmp
        die "$EX_RESTORE_FAILED" "litestream restore left a WAL next to the restored file, which cannot be moved \
atomically. Restart the pod to retry; report it if it persists."
    fi
    rm -f "$RESTORE_TMP-shm"
    rm -rf "$VERIFIED_DIR"
    if [ -n "$SIGNED_TXID" ]; then
        quarantine_unsigned "$DB_DIR/.backup-signed.tmp" "$SIGNED_TXID"
        rm -f "$DB_DIR/.backup-signed.tmp"
        mv -f "$BASELINE.tmp" "$BASELINE" || die "$EX_LOCAL_STATE" "Could not record the verified files in \
'$BASELINE'. Check that the data volume is writable, then restart the pod."
    elif [ -n "$BACKUP_KEY_FILE" ]; then
        # The unsigned override: the operator vouched for the replica as it is; the signer signs it from now on.
        (cd "$REPLICA_DIR/ltx" && for bl_file in [0-9]/*.ltx; do
            [ -f "$bl_file" ] && [ ! -L "$bl_file" ] || continue
            sha256sum "$bl_file"
        done) | awk '{ split($2, p, "/"); print p[1], p[2], $1 }' >"$BASELINE.tmp" || true
        if ! mv -f "$BASELINE.tmp" "$BASELINE"; then
            info "warning: could not record the replica's files in '$BASELINE'; the signer signs only what it writes."
        fi
    fi
    mv -f "$RESTORE_TMP" "$DB_PATH" || die "$EX_LOCAL_STATE" "Could not move the restored database into place \
at '$DB_PATH'. Check that the data volume is writable, then restart the pod."
    write_local_marker || die "$EX_LOCAL_STATE" "The database was restored to '$DB_PATH' but the local marker \
'$LOCAL_MARKER' could not be written. Check that the data volume is writable, then restart the pod."
    # The Litestream sidecar's startup probe holds the application until the replica has caught up with this
    # database (litestream-position.sh); it removes the marker then.
    if ! write_marker "$DB_DIR/.litestream-catch-up" restored; then
        info "warning: could not write '$DB_DIR/.litestream-catch-up'; the application will not wait for Litestream."
    fi
    if [ -n "$SIGNED_TXID" ] && ! write_marker "$POSITION_RECORD" "$SIGNED_TXID"; then
        info "warning: could not record the restored position in '$POSITION_RECORD'; continuing."
    fi
    info "restored '$DB_PATH' from the backup in '$BACKUP_DIR'${SIGNED_TXID:+ (signed position txid $SIGNED_TXID)}."
    exit 0
fi

# --- no replica data ------------------------------------------------------------------------------------------
if [ -n "$BACKUP_EXPECTED_BY" ]; then
    die "$EX_REPLICA_MISSING" "There is no local database and $BACKUP_EXPECTED_BY says a backup was made, but \
the replica in '$BACKUP_DIR' holds no data. Not starting empty over a lost backup. Restore the replica directory \
'$BACKUP_DIR/replica' from a copy of the NFS backup volume. If this application never finished its first start \
(no data was ever written), delete '$BACKUP_MARKER' and '$LOCAL_MARKER' to allow a first start."
fi

if [ "$REQUIRE_BACKUP" = true ]; then
    die "$EX_BACKUP_REQUIRED" "REQUIRE_BACKUP=true (a standby never first-starts) and there is neither a local \
database nor a backup in '$BACKUP_DIR'. Make the active stack's backup available at '$BACKUP_DIR' (NFS backup \
volume) and restart the pod, or promote this stack deliberately by setting REQUIRE_BACKUP to false."
fi

if [ "$SERVED_BEFORE" = true ]; then
    if [ "$ALLOW_EMPTY_START" != "$TODAY" ]; then
        die "$EX_SERVED_NO_BACKUP" "This site has served before (the served witness '$SERVED_FILE', written by \
Pulumi after the first ready rollout, says so), but there is neither a local database '$DB_PATH' nor a backup in \
'$BACKUP_DIR' (no replica data, no marker): the data volume and the backup directory are both lost, or the wrong \
NFS export is mounted. Not starting empty: an empty database would replace the served one in the backup on the \
next sync (for Headscale: every node would have to register again). Restore '$BACKUP_DIR' from a copy of the NFS backup volume (or mount the \
right export) and restart the pod. Only if the data is really gone: set the stack config headscale.allowEmptyStart \
to $TODAY (today's UTC date; the override is ignored on any other day) and run pulumi up, then remove it."
    fi
    info "!!! OVERRIDE: ALLOW_EMPTY_START=$ALLOW_EMPTY_START. This site has served before, but there is neither a \
local database nor a backup in '$BACKUP_DIR'."
    info "!!! STARTING EMPTY: the application starts with an empty database (for Headscale: every node must \
register again)."
    info "!!! Remove headscale.allowEmptyStart from the stack config now."
fi

# --- b. first start -------------------------------------------------------------------------------------------
move_stale_local_files
write_backup_marker || die "$EX_LOCAL_STATE" "First start: could not write '$BACKUP_MARKER'. Check that the NFS \
backup volume is mounted read-write (its parent directory must exist), then restart the pod."
write_local_marker || die "$EX_LOCAL_STATE" "First start: could not write the local marker '$LOCAL_MARKER'. \
Check that the data volume is writable, then restart the pod."
if [ "$SERVED_BEFORE" = true ]; then
    info "!!! STARTED EMPTY under ALLOW_EMPTY_START=$ALLOW_EMPTY_START; recorded the backup marker in '$BACKUP_DIR' and \
'$DB_DIR'."
    exit 0
fi
info "first start: no local database and no backup; recorded the backup marker in '$BACKUP_DIR' and '$DB_DIR'."
exit 0
