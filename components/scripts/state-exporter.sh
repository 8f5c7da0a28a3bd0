#!/bin/sh
# State exporter: what the Litestream file replicas on the NFS backup volume hold, as Prometheus metrics.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh, busybox tools, no curl or
# sqlite3. Why it exists: Litestream 0.5.17's own metrics do not show a broken file replica (when the replica
# target cannot be written it logs `monitor error ... write ltx file`, but sync_count keeps counting, sync_error_count
# stays 0 and txid keeps advancing locally). So this reads the replicas themselves, from the backup volume mounted
# read-only, with `litestream ltx`, and writes a metrics file that the pod's busybox httpd serves. The alerts
# (components/alerts.py) compare it with Litestream's local txid. It never writes under BACKUP_ROOT.
#
# Usage: state-exporter.sh          one round every INTERVAL_SECONDS until stopped (SIGTERM)
#        state-exporter.sh once     one round, then exit (tests, debugging)
#
# Environment:
#   APPS              space-separated application names (DNS labels), e.g. "headscale headplane"; each one's replica
#                     is BACKUP_ROOT/<app>/replica. Must be set; may be empty (then only the key expiries and the
#                     round's timestamp are exported).
#   BACKUP_ROOT       the backup volume's mount point (absolute; letters, digits, '.', '_', '-' and '/' only,
#                     because the replicas become file:// URLs), e.g. /backup
#   OUT_FILE          the metrics file to write (absolute, outside BACKUP_ROOT, in an existing writable
#                     directory). Written atomically: a temporary file in the same directory, then mv.
#   KEYS_FILE         optional: a file in the Prometheus text format appended verbatim to every round's output (the
#                     key-expiry ConfigMap). When it is missing, a comment line says so and the round goes on.
#   INTERVAL_SECONDS  optional, positive whole number (default 30): the pause between two rounds
#   LITESTREAM_BIN    optional: the litestream executable (default: litestream)
#
# Metrics (gauges), per application:
#   headscale_ha_replica_up{app}                         1: the replica directory exists, is readable and litestream
#                                                        listed it; 0 otherwise (then the three below are 0)
#   headscale_ha_replica_txid{app}                       the highest max_txid of the replica's LTX files, 0 when none
#   headscale_ha_replica_newest_timestamp_seconds{app}   the newest LTX file's timestamp (Unix seconds), 0 when none
#   headscale_ha_replica_ltx_files{app}                  how many LTX files (all levels) the replica holds
#   headscale_ha_replica_signed_timestamp_seconds{app}   the `signed_at` (Unix seconds) of the replica's signed
#                                                        manifest BACKUP_ROOT/<app>/replica.manifest (written by the
#                                                        backup-signer sidecar, litestream-manifest.sh); 0 when it
#                                                        is absent, unreadable, a symbolic link (never followed) or
#                                                        not a regular file, or when its line 3 is not exactly
#                                                        `signed_at <1 to 15 digits>`. Only the first 1024 bytes are
#                                                        read, and only digits reach the output. UNAUTHENTICATED: the
#                                                        exporter has no key and checks no MAC, so anyone who can
#                                                        write the export can set it. It is a liveness signal of the
#                                                        signer (BackupSignatureStale), not a proof that the replica
#                                                        is signed: only the restore's verify is.
#   headscale_ha_replica_unsigned_files{app}             only when that manifest was read (signed backups): how many
#                                                        entries at an LTX name in the replica the manifest does not
#                                                        list, of those ending after the newest snapshot it lists
#                                                        (older ones no restore reads). The signer signs a new file
#                                                        within a second, a compaction once proven (seconds), so a
#                                                        count that stays above 0 is what it refused (planted,
#                                                        crafted) or could not sign (BackupUnsignedFiles). Reads at
#                                                        most UNSIGNED_MAX_BYTES of the manifest; unauthenticated
#                                                        like signed_at.
# and once: headscale_ha_exporter_last_run_timestamp_seconds, the time (Unix seconds) the round started.
# A replica that cannot be read never stops the other applications or the loop; a hung read (an NFS hard mount)
# stops the loop, which the alert StateExporterDown sees in the round's timestamp.
#
# Logs (stderr): one line when the exporter starts, one when an application's replica becomes readable or
# unreadable (with the reason), and one when its manifest's signed_at becomes readable or not (with the reason),
# not one every round.
#
# Exit codes:
#    0  `once`: the round's metrics file was written (whatever the replicas' state)
#    1  `once`: the metrics file could not be written (the loop only logs it and retries next round)
#    2  bad invocation: an argument, or a variable missing or malformed, or no litestream executable
#  129/130/143  stopped by SIGHUP/SIGINT/SIGTERM (the loop's normal end)
#
# No `set -e`: a failing command must cost at most one application's metrics, never the loop. Globbing is off.
set -u
set -f
LC_ALL=C
export LC_ALL

PROG=state-exporter
EX_WRITE=1
EX_USAGE=2
NL='
'

log() {
    printf '%s: %s\n' "$PROG" "$1" >&2
}

usage() {
    log "bad invocation (exit $EX_USAGE): $1 Fix the state exporter's environment (components/alerts.py documents it)."
    exit "$EX_USAGE"
}

# --- inputs -------------------------------------------------------------------------------------------------
MODE=loop
if [ "$#" -gt 1 ]; then
    usage "expected no argument or 'once', got $# arguments."
elif [ "$#" -eq 1 ]; then
    [ "$1" = once ] || usage "unknown argument '$1' (the only argument is 'once')."
    MODE=once
fi

[ "${APPS+set}" = set ] || usage "APPS is not set: give the applications' names, e.g. APPS='headscale headplane'."
SEEN=' '
for app in $APPS; do
    case "$app" in
        -* | *- | *[!a-z0-9-]*)
            usage "APPS: '$app' is not a DNS label (lowercase letters, digits and '-', not at either end)." ;;
    esac
    [ "${#app}" -le 63 ] || usage "APPS: '$app' is longer than 63 characters."
    case "$SEEN" in
        *" $app "*) usage "APPS: '$app' is listed twice." ;;
    esac
    SEEN="$SEEN$app "
done

BACKUP_ROOT=${BACKUP_ROOT:-}
case "$BACKUP_ROOT" in
    /*) ;;
    *) usage "BACKUP_ROOT must be an absolute path, e.g. /backup (got '$BACKUP_ROOT')." ;;
esac
BACKUP_ROOT=${BACKUP_ROOT%/}
[ -n "$BACKUP_ROOT" ] || usage "BACKUP_ROOT must not be '/': point it at the backup volume's mount."
case "$BACKUP_ROOT/" in
    *[!A-Za-z0-9._/-]* | *//* | */./* | */../*)
        usage "BACKUP_ROOT must be a plain absolute path of letters, digits, '.', '_', '-' and '/', without '.' or \
'..' parts (got '$BACKUP_ROOT'): the replicas become file:// URLs for litestream." ;;
esac

OUT_FILE=${OUT_FILE:-}
case "$OUT_FILE" in
    */) usage "OUT_FILE must name a file, not a directory (got '$OUT_FILE')." ;;
    /*) ;;
    *) usage "OUT_FILE must be an absolute path, e.g. /srv/metrics.prom (got '$OUT_FILE')." ;;
esac
case "$OUT_FILE/" in
    */./* | */../* | *//*) usage "OUT_FILE must not have '.' or '..' parts or '//' (got '$OUT_FILE')." ;;
    "$BACKUP_ROOT"/*) usage "OUT_FILE '$OUT_FILE' is under BACKUP_ROOT '$BACKUP_ROOT'; the exporter never writes \
there. Use the pod's own emptyDir." ;;
esac
OUT_DIR=${OUT_FILE%/*}
OUT_DIR=${OUT_DIR:-/}
OUT_BASE=${OUT_FILE##*/}
if [ ! -d "$OUT_DIR" ] || [ ! -w "$OUT_DIR" ]; then
    usage "OUT_FILE's directory '$OUT_DIR' is not a writable directory. Check the emptyDir mount."
fi

KEYS_FILE=${KEYS_FILE:-}
case "$KEYS_FILE" in
    '' | /*) ;;
    *) usage "KEYS_FILE must be an absolute path or unset (got '$KEYS_FILE')." ;;
esac

INTERVAL_SECONDS=${INTERVAL_SECONDS:-30}
case "$INTERVAL_SECONDS" in
    '' | *[!0-9]* | 0*)
        usage "INTERVAL_SECONDS must be a positive whole number of seconds without leading zeros, e.g. 30 \
(got '$INTERVAL_SECONDS')." ;;
esac
[ "${#INTERVAL_SECONDS}" -le 6 ] || usage "INTERVAL_SECONDS must be at most 6 digits (got '$INTERVAL_SECONDS')."

LITESTREAM_BIN=${LITESTREAM_BIN:-litestream}
command -v "$LITESTREAM_BIN" >/dev/null 2>&1 || usage "LITESTREAM_BIN: the litestream executable \
'$LITESTREAM_BIN' was not found. Run this script in the litestream image or set LITESTREAM_BIN."

# --- one application's replica --------------------------------------------------------------------------------
# inspect APP: sets I_UP, I_TXID, I_NEWEST, I_FILES and, when I_UP is 0, I_WHY.
inspect() {
    I_UP=0
    I_TXID=0
    I_NEWEST=0
    I_FILES=0
    I_WHY=
    i_dir="$BACKUP_ROOT/$1/replica"
    if [ ! -d "$i_dir" ]; then
        I_WHY="the replica directory '$i_dir' does not exist or is not a directory"
        return
    fi
    if [ ! -r "$i_dir" ] || [ ! -x "$i_dir" ] || ! ls "$i_dir" >/dev/null 2>&1; then
        I_WHY="the replica directory '$i_dir' cannot be read (permissions, or the NFS export)"
        return
    fi
    if ! i_listing=$("$LITESTREAM_BIN" ltx -json -level all "file://$i_dir" 2>&1); then
        I_WHY="litestream cannot list '$i_dir': $(printf '%s\n' "$i_listing" | head -n 3 | tr '\n' ' ')"
        return
    fi
    # One JSON object per LTX file, one key per line (Litestream 0.5's listing).
    i_files=$(printf '%s\n' "$i_listing" | grep -c '"min_txid"')
    if [ "$i_files" -eq 0 ]; then
        if [ "$(printf '%s' "$i_listing" | tr -d ' \t\r\n')" = '[]' ]; then
            I_UP=1 # an empty replica: readable, nothing in it yet
        else
            I_WHY="litestream's listing of '$i_dir' is neither an empty list nor a list of LTX files"
        fi
        return
    fi
    i_txids=$(printf '%s\n' "$i_listing" |
        sed -n 's/^[[:space:]]*"max_txid":[[:space:]]*"\([0-9A-Fa-f]*\)".*$/\1/p' | tr 'A-F' 'a-f')
    i_stamps=$(printf '%s\n' "$i_listing" | sed -n 's/^[[:space:]]*"timestamp":[[:space:]]*"\([^"]*\)".*$/\1/p' |
        sed -n 's/^\([0-9]\{4\}-[0-9][0-9]-[0-9][0-9]\)T\([0-9][0-9]:[0-9][0-9]:[0-9][0-9]\)\(\.[0-9]*\)\{0,1\}Z$/\1 \2/p')
    if [ "$(printf '%s\n' "$i_txids" | grep -c .)" -ne "$i_files" ] ||
        [ "$(printf '%s\n' "$i_stamps" | grep -c .)" -ne "$i_files" ]; then
        I_WHY="litestream listed $i_files LTX files in '$i_dir' but not one max_txid and one UTC timestamp each"
        return
    fi
    # Fixed-width hex and 'YYYY-MM-DD hh:mm:ss' (C locale) sort like the numbers and times they stand for.
    i_max=$(printf '%s\n' "$i_txids" | sort | tail -n 1)
    i_newest=$(printf '%s\n' "$i_stamps" | sort | tail -n 1)
    case "$i_max" in
        [0-7]???????????????) ;;
        *)
            I_WHY="the replica's newest txid '$i_max' is not 16 hex digits below 2^63"
            return
            ;;
    esac
    # busybox `date -d` takes 'YYYY-MM-DD hh:mm:ss', not RFC 3339 (GNU date takes both).
    if ! i_epoch=$(date -u -d "$i_newest" +%s 2>/dev/null); then
        I_WHY="the newest LTX timestamp '$i_newest' is not a date this image's date command understands"
        return
    fi
    I_TXID=$((0x$i_max))
    I_NEWEST=$i_epoch
    I_FILES=$i_files
    I_UP=1
}

# signed APP: sets S_AT to the signed_at of APP's manifest (digits only), or to 0 with the reason in S_WHY and a
# one-word state in S_STATE. The file is untrusted text (whoever can write the export can write it): a symbolic link
# is refused, not followed (a link swapped in between the test and the read is read once; still only digits leave),
# a FIFO or device is refused by the regular-file test, and `head -c` bounds what is read however long its lines.
SIGNED_MAX_BYTES=1024
signed() {
    S_AT=0
    S_WHY=
    S_STATE=ok
    s_file="$BACKUP_ROOT/$1/replica.manifest"
    if [ -L "$s_file" ]; then
        S_STATE=symlink
        S_WHY="the manifest '$s_file' is a symbolic link (not followed)"
        return
    fi
    if [ ! -e "$s_file" ]; then
        S_STATE=absent
        S_WHY="there is no manifest '$s_file' (the backup-signer sidecar has never signed this replica)"
        return
    fi
    if [ ! -f "$s_file" ]; then
        S_STATE=notfile
        S_WHY="the manifest '$s_file' is not a regular file"
        return
    fi
    if [ ! -r "$s_file" ] || ! s_head=$(head -c "$SIGNED_MAX_BYTES" "$s_file" 2>/dev/null); then
        S_STATE=unreadable
        S_WHY="the manifest '$s_file' cannot be read (permissions, or the NFS export)"
        return
    fi
    s_line=$(printf '%s\n' "$s_head" | sed -n '3{p;q;}')
    s_at=${s_line#signed_at }
    case "$s_line" in
        "signed_at "[0-9]*) ;;
        *) s_at=x ;;
    esac
    case "$s_at" in
        *[!0-9]*) s_at=x ;;
    esac
    while :; do
        case "$s_at" in
            0?*) s_at=${s_at#0} ;;
            *) break ;;
        esac
    done
    if [ "$s_at" = x ] || [ "${#s_at}" -gt 15 ]; then
        S_STATE=malformed
        S_WHY="line 3 of the manifest '$s_file' is not 'signed_at <1 to 15 digits>'"
        return
    fi
    S_AT=$s_at
}

# unsigned APP: U_COUNT, the replica's entries at LTX names that APP's manifest (read by `signed` this round) does not
# list and that end after the newest snapshot it lists; empty when the manifest was not read. Names only: nothing in
# the replica is opened, and only a count leaves.
UNSIGNED_MAX_BYTES=8388608
unsigned() {
    U_COUNT=
    [ "$S_STATE" = ok ] || return 0
    u_dir="$BACKUP_ROOT/$1/replica/ltx"
    if [ -L "$u_dir" ] || [ ! -d "$u_dir" ]; then
        U_COUNT=0
        return 0
    fi
    U_COUNT=$({
        head -c "$UNSIGNED_MAX_BYTES" "$BACKUP_ROOT/$1/replica.manifest" 2>/dev/null | sed 's/^/m /'
        find "$u_dir" -mindepth 2 -maxdepth 2 -name '*.ltx' 2>/dev/null | sed 's/^/r /'
    } | awk -v root="$u_dir/" '
        $1 == "m" && $2 == "f" && NF == 6 { listed[$3 "/" $4] = 1; if ($3 == "9" && $4 > snap) snap = $4; next }
        $1 == "r" { n++; rel[n] = substr($0, 3 + length(root)) }
        END {
            top = substr(snap, 18, 16)
            for (i = 1; i <= n; i++) {
                if (split(rel[i], part, "/") != 2 || part[1] !~ /^[0-9]$/ || length(part[2]) != 37) continue
                if (part[2] !~ /^[0-9a-f]+-[0-9a-f]+[.]ltx$/ || (rel[i] in listed)) continue
                if (substr(part[2], 18, 16) > top) count++
            }
            print count + 0
        }')
    case "$U_COUNT" in '' | *[!0-9]*) U_COUNT=0 ;; esac
}

# note NAME STATE MESSAGE: log MESSAGE when NAME's state differs from the previous round's (or on the first one).
STATES=' '
NEW_STATES=' '
note() {
    case "$STATES" in
        *" $1=$2 "*) ;;
        *) log "$3" ;;
    esac
    NEW_STATES="$NEW_STATES$1=$2 "
}

# family NAME HELP SAMPLES: one metric family in the text format.
family() {
    printf '# HELP %s %s\n# TYPE %s gauge\n%s' "$1" "$2" "$1" "$3"
}

# keys: the key-expiry file, verbatim (a missing final newline added), or a comment when there is none.
keys() {
    if [ -z "$KEYS_FILE" ]; then
        return 0
    fi
    if [ -f "$KEYS_FILE" ] && [ -r "$KEYS_FILE" ]; then
        note keys 1 "appending the key expiries of KEYS_FILE '$KEYS_FILE'"
        cat "$KEYS_FILE" || return 1
        if [ -n "$(tail -c 1 "$KEYS_FILE")" ]; then
            printf '\n'
        fi
    else
        note keys 0 "KEYS_FILE '$KEYS_FILE' is missing or unreadable: no key expiries until it appears"
        printf '# KEYS_FILE %s is missing or unreadable: no key expiries this round\n' "$KEYS_FILE"
    fi
}

TMP_FILE=
SLEEP_PID=
cleanup() {
    if [ -n "$TMP_FILE" ]; then
        rm -f "$TMP_FILE"
    fi
    if [ -n "$SLEEP_PID" ]; then
        kill "$SLEEP_PID" 2>/dev/null
    fi
}
trap 'cleanup; exit 129' HUP
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# round: inspect every application, then write OUT_FILE in one rename. Returns 1 when it could not be written.
round() {
    r_now=$(date -u +%s)
    r_up=
    r_txid=
    r_newest=
    r_files=
    r_signed=
    r_unsigned=
    NEW_STATES=' '
    for r_app in $APPS; do
        inspect "$r_app"
        r_label="{app=\"$r_app\"}"
        r_up="${r_up}headscale_ha_replica_up$r_label $I_UP$NL"
        r_txid="${r_txid}headscale_ha_replica_txid$r_label $I_TXID$NL"
        r_newest="${r_newest}headscale_ha_replica_newest_timestamp_seconds$r_label $I_NEWEST$NL"
        r_files="${r_files}headscale_ha_replica_ltx_files$r_label $I_FILES$NL"
        if [ "$I_UP" -eq 1 ]; then
            note "$r_app" 1 "$r_app: replica readable (txid $I_TXID, $I_FILES LTX files)"
        else
            note "$r_app" 0 "$r_app: replica NOT readable: $I_WHY"
        fi
        signed "$r_app"
        r_signed="${r_signed}headscale_ha_replica_signed_timestamp_seconds$r_label $S_AT$NL"
        unsigned "$r_app"
        if [ -n "$U_COUNT" ]; then
            r_unsigned="${r_unsigned}headscale_ha_replica_unsigned_files$r_label $U_COUNT$NL"
        fi
        if [ "$S_STATE" = ok ]; then
            note "manifest:$r_app" ok "$r_app: manifest readable (signed_at $S_AT; unauthenticated here)"
        else
            note "manifest:$r_app" "$S_STATE" "$r_app: manifest signed_at NOT readable, exported as 0: $S_WHY"
        fi
    done
    TMP_FILE="$OUT_DIR/.$OUT_BASE.tmp.$$"
    if ! {
        if [ -n "$APPS" ]; then
            family headscale_ha_replica_up "1 when the application's Litestream replica directory is readable and \
litestream lists it, else 0." "$r_up" &&
                family headscale_ha_replica_txid "Highest transaction id in the application's replica (0 when none \
or unreadable)." "$r_txid" &&
                family headscale_ha_replica_newest_timestamp_seconds "Unix time of the newest LTX file in the \
application's replica (0 when none or unreadable)." "$r_newest" &&
                family headscale_ha_replica_ltx_files "LTX files (all levels) in the application's replica (0 when \
unreadable)." "$r_files" &&
                family headscale_ha_replica_signed_timestamp_seconds "Unix time the backup-signer last signed the \
application's replica: signed_at of its replica.manifest, unauthenticated (0 when absent, unreadable, a symlink or \
malformed)." "$r_signed" &&
                family headscale_ha_replica_unsigned_files "Files at LTX names in the application's replica that its \
manifest does not list, ending after the newest snapshot it lists (unauthenticated; only with a readable manifest)." \
                    "$r_unsigned"
        fi &&
            family headscale_ha_exporter_last_run_timestamp_seconds "Unix time the state exporter's latest round \
started." "headscale_ha_exporter_last_run_timestamp_seconds $r_now$NL" &&
            keys
    } >"$TMP_FILE"; then
        rm -f "$TMP_FILE"
        TMP_FILE=
        return 1
    fi
    if ! mv -f "$TMP_FILE" "$OUT_FILE"; then
        rm -f "$TMP_FILE"
        TMP_FILE=
        return 1
    fi
    TMP_FILE=
    STATES=$NEW_STATES
    return 0
}

# --- main -----------------------------------------------------------------------------------------------------
if [ "$MODE" = loop ]; then
    log "watching the replicas of '${APPS}' under '$BACKUP_ROOT' every $INTERVAL_SECONDS s into '$OUT_FILE'"
fi
while :; do
    if ! round; then
        log "could not write the metrics file '$OUT_FILE' (its directory '$OUT_DIR' full or read-only?)"
        if [ "$MODE" = once ]; then
            exit "$EX_WRITE"
        fi
    fi
    if [ "$MODE" = once ]; then
        exit 0
    fi
    # In the background, so that SIGTERM ends the pause at once instead of after it.
    sleep "$INTERVAL_SECONDS" &
    SLEEP_PID=$!
    wait "$SLEEP_PID"
    SLEEP_PID=
done
