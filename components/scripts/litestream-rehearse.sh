#!/bin/sh
# Restore rehearsal for one SQLite application (Headscale or Headplane), run by a CronJob.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh, busybox tools, no sqlite3.
# A backup nobody has restored is a hope, not a backup: this restores the newest state of the Litestream file
# replica on the NFS backup volume (mounted read-only) into scratch storage, lets Litestream run SQLite's full
# integrity check on the result, and fails the Job loudly when the replica is missing, empty, too old or does not
# restore. It never writes under REPLICA_DIR, and it removes the restored copy when it ends, whatever the outcome.
#
# Environment:
#   REPLICA_DIR      the application's Litestream file replica directory, e.g. /backup/headscale/replica (absolute;
#                    letters, digits, '.', '_', '-' and '/' only, because it becomes a file:// URL)
#   SCRATCH_DIR      writable scratch directory (absolute, an emptyDir), not inside REPLICA_DIR
#   MAX_AGE_SECONDS  positive integer: the newest LTX file of the replica may be at most this many seconds old
#   APP              the application's name (lowercase letters, digits, '-'), for messages and the scratch file
#   LITESTREAM_BIN   optional: litestream executable (default: litestream)
#   BACKUP_KEY_FILE  optional: the tailnet's backup key; set = the replica's signed manifest is verified the way the
#                    restore verifies it (litestream-manifest.sh verify), and the verified copy is what is restored
#   MANIFEST_FILE    with BACKUP_KEY_FILE: the manifest (absolute; default: replica.manifest beside REPLICA_DIR)
#   MANIFEST_SCRIPT  with BACKUP_KEY_FILE: litestream-manifest.sh (default: manifest.sh beside this script)
#   MANIFEST_MAX_AGE_SECONDS  optional, with BACKUP_KEY_FILE: the restore's backup.auth.maxAge; a manifest signed
#                    longer ago fails the rehearsal (exit 55) as it would fail a restore (the signer stopped)
#
# Age: the newest `timestamp` that `litestream ltx -level all` lists. Litestream writes a level-0 file within a
# monitor tick of each transaction and compacts or snapshots only when new data arrived, so for an idle database
# this is (to a few seconds) the time of its last transaction; a database idle for longer than MAX_AGE_SECONDS
# therefore looks exactly like replication that stopped.
#
# Order: the replica is restored and checked even when it is too old, so a stale message can say whether the
# backup that does exist restores; a replica that is both stale and broken exits 53 (the worse finding).
#
# Output: on success exactly one line on stdout,
#   restore rehearsal ok: app=<APP> bytes=<restored size> seconds=<restore wall time> \
#   last_transaction_age_seconds=<age> max_age_seconds=<MAX_AGE_SECONDS> ltx_files=<LTX files listed>
# (seconds: the restore's wall time, e.g. 0.042; in whole seconds, e.g. 0, where date lacks %N). Everything else,
# Litestream's own output included, goes to stderr.
#
# Exit codes:
#    0  the newest backup restored, passed the integrity check and is at most MAX_AGE_SECONDS old
#    2  bad invocation: a variable missing or malformed, SCRATCH_DIR unusable, no litestream executable
#   50  REPLICA_DIR does not exist, is not a directory, or cannot be read (backup volume not mounted?)
#   51  no backup: the replica directory holds no LTX file
#   52  stale: the newest LTX file is older than MAX_AGE_SECONDS (the backup itself restores)
#   53  the restore failed, or did not produce a database that passes the integrity check
#   54  litestream cannot list the replica, or lists it in a form this script does not understand
#   55  (BACKUP_KEY_FILE) the replica is not authenticated: no manifest, a MAC that does not verify, a truncated
#       manifest, a file that differs from its signed digest (the manifest check's own exit code, 40-46, is printed)
set -eu

PROG=litestream-rehearse
EX_USAGE=2
EX_REPLICA_DIR=50
EX_NO_BACKUP=51
EX_STALE=52
EX_RESTORE_FAILED=53
EX_LISTING=54
EX_UNAUTHENTICATED=55

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info

# die CODE MESSAGE: one paragraph saying what happened and what to do, then exit CODE.
die() {
    printf '%s: RESTORE REHEARSAL FAILED (exit %s) for %s: %s\n' "$PROG" "$1" "${APP:-?}" "$2" >&2
    exit "$1"
}

usage() {
    die "$EX_USAGE" "$1 Fix the rehearsal CronJob's environment (components/rehearsal.py)."
}

# The restore is timed to the millisecond where date supports %N (GNU; busybox only if built with it), else in
# whole seconds.
case "$(date -u +%N 2>/dev/null || true)" in
    '' | *[!0-9]*) CLOCK_MS=false ;;
    *) CLOCK_MS=true ;;
esac

now_ms() {
    if [ "$CLOCK_MS" = true ]; then
        nm_value=$(date -u +%s%N)
        printf '%s' "${nm_value%??????}"
    else
        printf '%s000' "$(date -u +%s)"
    fi
}

# 1234 -> "1.234" (or "1" when only whole seconds are measured)
format_seconds() {
    if [ "$CLOCK_MS" = true ]; then
        printf '%d.%03d' "$(($1 / 1000))" "$(($1 % 1000))"
    else
        printf '%d' "$(($1 / 1000))"
    fi
}

OUTPUT=
VERIFIED=
remove_output() {
    if [ -n "$OUTPUT" ]; then
        rm -f "$OUTPUT" "$OUTPUT.tmp" "$OUTPUT-wal" "$OUTPUT-shm" "$OUTPUT-journal"
    fi
    if [ -n "$VERIFIED" ]; then
        rm -rf "$VERIFIED"
    fi
}
# The restored copy never outlives the run: removed on every exit (the exit status is kept), and on a signal.
trap remove_output EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# --- inputs -------------------------------------------------------------------------------------------------
APP=${APP:-}
REPLICA_DIR=${REPLICA_DIR:-}
SCRATCH_DIR=${SCRATCH_DIR:-}
MAX_AGE_SECONDS=${MAX_AGE_SECONDS:-}
LITESTREAM_BIN=${LITESTREAM_BIN:-litestream}
BACKUP_KEY_FILE=${BACKUP_KEY_FILE:-}
MANIFEST_FILE=${MANIFEST_FILE:-}
MANIFEST_SCRIPT=${MANIFEST_SCRIPT:-$(dirname "$0")/manifest.sh}
MANIFEST_MAX_AGE_SECONDS=${MANIFEST_MAX_AGE_SECONDS:-}

case "$APP" in
    '' | *[!a-z0-9-]*) usage "APP must be the application's name, lowercase letters, digits and '-' (got '$APP')." ;;
esac
case "$REPLICA_DIR" in
    /*) ;;
    *) usage "REPLICA_DIR must be an absolute path, e.g. /backup/$APP/replica (got '$REPLICA_DIR')." ;;
esac
REPLICA_DIR=${REPLICA_DIR%/}
[ -n "$REPLICA_DIR" ] || usage "REPLICA_DIR must not be '/'. Point it at the application's replica directory."
case "$REPLICA_DIR/" in
    *[!A-Za-z0-9._/-]* | *//* | */./* | */../*)
        usage "REPLICA_DIR must be a plain absolute path of letters, digits, '.', '_', '-' and '/', without '.' or \
'..' parts (got '$REPLICA_DIR'): it becomes a file:// URL for litestream." ;;
esac
case "$SCRATCH_DIR" in
    /*) ;;
    *) usage "SCRATCH_DIR must be an absolute path, e.g. /scratch (got '$SCRATCH_DIR')." ;;
esac
SCRATCH_DIR=${SCRATCH_DIR%/}
case "$SCRATCH_DIR/" in
    "$REPLICA_DIR/"*) usage "SCRATCH_DIR '$SCRATCH_DIR' is inside REPLICA_DIR '$REPLICA_DIR'; the rehearsal never \
writes under the replica. Use a scratch emptyDir." ;;
esac
case "$MAX_AGE_SECONDS" in
    '' | *[!0-9]* | 0*)
        usage "MAX_AGE_SECONDS must be a positive whole number of seconds without leading zeros, e.g. 86400 \
(got '$MAX_AGE_SECONDS')." ;;
esac
if [ "${#MAX_AGE_SECONDS}" -gt 10 ]; then
    usage "MAX_AGE_SECONDS must be at most 10 digits (got '$MAX_AGE_SECONDS')."
fi
if [ ! -d "$SCRATCH_DIR" ] || [ ! -w "$SCRATCH_DIR" ]; then
    usage "SCRATCH_DIR '$SCRATCH_DIR' is not a writable directory. Check the scratch emptyDir mount."
fi
if [ -n "$BACKUP_KEY_FILE" ]; then
    case "$SCRATCH_DIR/" in
        *[!A-Za-z0-9._/-]*) usage "SCRATCH_DIR must be a plain path of letters, digits, '.', '_', '-' and '/' with \
BACKUP_KEY_FILE (got '$SCRATCH_DIR'): the verified copy is restored through a file:// URL." ;;
    esac
    MANIFEST_FILE=${MANIFEST_FILE:-${REPLICA_DIR%/*}/replica.manifest}
    case "$MANIFEST_FILE" in
        /*) ;;
        *) usage "MANIFEST_FILE must be an absolute path (got '$MANIFEST_FILE')." ;;
    esac
    [ -f "$MANIFEST_SCRIPT" ] || usage "The manifest script MANIFEST_SCRIPT='$MANIFEST_SCRIPT' is missing. Check \
the rehearsal's ConfigMap volume."
fi
command -v "$LITESTREAM_BIN" >/dev/null 2>&1 || usage "The litestream executable LITESTREAM_BIN='$LITESTREAM_BIN' \
was not found. Run this script in the litestream image or set LITESTREAM_BIN."

# --- the replica directory ------------------------------------------------------------------------------------
if [ ! -d "$REPLICA_DIR" ]; then
    die "$EX_REPLICA_DIR" "The replica directory REPLICA_DIR='$REPLICA_DIR' does not exist (or is not a directory). \
Either the NFS backup volume is not mounted where the CronJob expects it, or Litestream has never replicated \
$APP. Check the backup claim and the export, and the litestream sidecar of $APP (kubectl logs <pod> -c litestream)."
fi
if [ ! -r "$REPLICA_DIR" ] || [ ! -x "$REPLICA_DIR" ] || ! ls "$REPLICA_DIR" >/dev/null 2>&1; then
    die "$EX_REPLICA_DIR" "The replica directory '$REPLICA_DIR' cannot be read. Check the NFS export's permissions \
for the rehearsal's user and group (65532) and the backup volume mount."
fi
URL="file://$REPLICA_DIR"

# --- what the replica holds (litestream is the authority on its own layout) ----------------------------------
if ! LISTING=$("$LITESTREAM_BIN" ltx -json -level all "$URL" 2>&1); then
    die "$EX_LISTING" "litestream cannot list the replica in '$REPLICA_DIR' ($LISTING). Check the files and \
permissions under '$REPLICA_DIR' on the NFS backup volume."
fi
# One JSON object per LTX file, one key per line; log lines never contain these quoted keys.
LTX_FILES=$(printf '%s\n' "$LISTING" | grep -c '"min_txid"' || true)
if [ "$LTX_FILES" -eq 0 ] && [ "$(printf '%s' "$LISTING" | tr -d ' \t\r\n')" != '[]' ]; then
    die "$EX_LISTING" "litestream's listing of the replica in '$REPLICA_DIR' is neither an empty list nor a list \
of LTX files ($LISTING). This script understands Litestream 0.5's listing; check that the image runs the pinned \
Litestream version."
fi
if [ "$LTX_FILES" -eq 0 ]; then
    die "$EX_NO_BACKUP" "There is no backup: the replica directory '$REPLICA_DIR' holds no LTX file. Litestream is \
not replicating $APP to it: check the litestream sidecar of $APP (kubectl logs <pod> -c litestream) and that it \
writes to the same NFS export and sub-directory that this CronJob mounts."
fi
# RFC 3339 UTC timestamps sort like the times they stand for.
NEWEST=$(printf '%s\n' "$LISTING" | sed -n 's/^[[:space:]]*"timestamp":[[:space:]]*"\([^"]*\)".*$/\1/p' |
    sort | tail -n 1)
TIMESTAMPS=$(printf '%s\n' "$LISTING" | grep -c '"timestamp"' || true)
case "$NEWEST" in
    [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z | \
        [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9].*Z) ;;
    *) NEWEST_BAD=true ;;
esac
if [ "$TIMESTAMPS" -ne "$LTX_FILES" ] || [ "${NEWEST_BAD:-false}" = true ]; then
    die "$EX_LISTING" "litestream listed $LTX_FILES LTX files in '$REPLICA_DIR' but not one UTC timestamp per file \
(newest: '$NEWEST'). This script understands Litestream 0.5's listing; check that the image runs the pinned \
Litestream version."
fi
# busybox date -d takes 'YYYY-MM-DD hh:mm:ss' (not RFC 3339): drop the fraction and 'Z', replace the 'T'.
NEWEST_PLAIN=${NEWEST%Z}
NEWEST_PLAIN=${NEWEST_PLAIN%%.*}
NEWEST_PLAIN="${NEWEST_PLAIN%%T*} ${NEWEST_PLAIN#*T}"
if ! NEWEST_EPOCH=$(date -u -d "$NEWEST_PLAIN" +%s 2>/dev/null); then
    die "$EX_LISTING" "The newest LTX timestamp '$NEWEST' in '$REPLICA_DIR' is not a date this image's date \
command understands. Check that the image runs the pinned Litestream version."
fi
NOW_EPOCH=$(date -u +%s)
AGE=$((NOW_EPOCH - NEWEST_EPOCH))
if [ "$AGE" -lt 0 ]; then
    info "warning: the newest LTX file ($NEWEST) is $((-AGE)) s in the future: the clock of the node that runs \
$APP's litestream sidecar is ahead of this one. Counting its age as 0; fix the node clocks (NTP)."
    AGE=0
fi

# --- restore into scratch, checked --------------------------------------------------------------------------
OUTPUT="$SCRATCH_DIR/$APP.sqlite"
remove_output
if [ -n "$BACKUP_KEY_FILE" ]; then
    # The same check as the restore's, into scratch: what is restored below is the verified copy.
    VERIFIED="$SCRATCH_DIR/$APP.verified"
    rm -rf "$VERIFIED"
    VERIFY_STATUS=0
    VERIFY_OUT=$(KEY_FILE=$BACKUP_KEY_FILE APP=$APP REPLICA_DIR=$REPLICA_DIR MANIFEST_FILE=$MANIFEST_FILE \
        COPY_DIR=$VERIFIED MAX_AGE_SECONDS=$MANIFEST_MAX_AGE_SECONDS /bin/sh "$MANIFEST_SCRIPT" verify) ||
        VERIFY_STATUS=$?
    if [ "$VERIFY_STATUS" -ne 0 ]; then
        die "$EX_UNAUTHENTICATED" "The replica in '$REPLICA_DIR' is not authenticated: the manifest check refused \
it with exit $VERIFY_STATUS (its message is above). A restore of $APP would refuse it the same way. Inspect the NFS \
export (docs/security.md, 'Trust model of the backup export')."
    fi
    info "the replica's manifest verified ($VERIFY_OUT)."
    URL="file://$VERIFIED"
fi
info "restoring $APP from '$REPLICA_DIR' ($LTX_FILES LTX files, newest $NEWEST, ${AGE} s old) into '$OUTPUT'."
STARTED=$(now_ms)
if ! "$LITESTREAM_BIN" restore -integrity-check full -o "$OUTPUT" "$URL" >&2; then
    die "$EX_RESTORE_FAILED" "litestream restore from '$REPLICA_DIR' failed (see its output above): the newest \
backup of $APP does NOT restore, so it could not be used after a loss. $APP's live database is not affected. Copy \
'$REPLICA_DIR' aside for inspection (the error names the broken file; check the NFS server's disks), then start a \
fresh replica: move the replica directory aside on the NFS server and restart $APP's pod, whose litestream sidecar \
then writes a new full snapshot. Re-run the rehearsal to confirm (kubectl create job --from=cronjob/<cronjob> <name>)."
fi
ELAPSED_MS=$(($(now_ms) - STARTED))
HEADER=$(head -c 15 "$OUTPUT" 2>/dev/null || true)
BYTES=$(wc -c <"$OUTPUT" 2>/dev/null | tr -d ' ' || true)
if [ "$HEADER" != "SQLite format 3" ] || [ -z "$BYTES" ] || [ "$BYTES" -eq 0 ]; then
    die "$EX_RESTORE_FAILED" "litestream restore from '$REPLICA_DIR' reported success but did not produce a SQLite \
database at '$OUTPUT'. Treat the backup of $APP as unusable: check the replica files on the NFS backup volume and \
the litestream sidecar of $APP."
fi
SECONDS_TAKEN=$(format_seconds "$ELAPSED_MS")

if [ "$AGE" -gt "$MAX_AGE_SECONDS" ]; then
    die "$EX_STALE" "The backup of $APP is stale: its newest transaction ($NEWEST) is $AGE s old, more than \
MAX_AGE_SECONDS=$MAX_AGE_SECONDS s. (It does restore and passes the integrity check, $BYTES bytes.) Either \
replication stopped, or the database has been idle longer than the threshold. Check the litestream sidecar of \
$APP (kubectl logs <pod> -c litestream) and the NFS mount; if $APP is legitimately idle that long, raise \
backup.rehearsal.maxAge."
fi

printf 'restore rehearsal ok: app=%s bytes=%s seconds=%s last_transaction_age_seconds=%s max_age_seconds=%s %s\n' \
    "$APP" "$BYTES" "$SECONDS_TAKEN" "$AGE" "$MAX_AGE_SECONDS" "ltx_files=$LTX_FILES"
