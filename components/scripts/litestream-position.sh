#!/bin/sh
# Has Litestream shipped everything the database holds? The startup probe and the preStop hook of the litestream
# native sidecar, so that no write reaches the database before the replica can hold it, and no graceful stop ends
# before the last write is shipped.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh and busybox tools (sleep, date,
# cmp).
#
#   sh litestream-position.sh caught-up   exit 0 when the application may write: the database was not just restored
#                                         (no "<dir>/.litestream-catch-up" marker, which the restore leaves: a local
#                                         database that was served before, or none yet, is not held, so a
#                                         persistent volume keeps serving through an NFS outage), or Litestream has
#                                         taken the restored database over (its local LTX directory exists) and the
#                                         replica holds its newest position, and then the marker is removed; exit 1
#                                         otherwise (the kubelet probes again)
#   sh litestream-position.sh drain       the preStop hook (the application has stopped): wait until the replica
#                                         holds the newest local position and has held it over a full Litestream
#                                         tick (SETTLE_SECONDS), at most MAX_SECONDS; exit 0 either way (a hook
#                                         that fails only delays the stop), saying which on stderr
#
# Why: after a restore, Litestream's first tick takes the database over from the replica ("database behind
# replica") and only its next ones ship new transactions, so an application that writes at once can lose what it
# wrote until then; a SIGTERM less than a tick after Litestream (re)started ships nothing at all.
#
# Environment:
#   DB_PATH         the application's SQLite file (absolute); Litestream's own state is "<dir>/.<name>-litestream"
#   REPLICA_DIR     the Litestream file replica directory (absolute)
#   SETTLE_SECONDS  drain: how long the replica must stay caught up (default 3: the 1 s monitor tick, the sync
#                   interval, a margin)
#   MAX_SECONDS     drain: the longest wait (default 10; the pod's grace period must hold it)
#
# Caught up means the replica holds Litestream's newest local level-0 file with the same bytes (cmp): never a count
# of names, which anyone who can write the export can plant.
#
# Exit codes:
#    0  caught up (caught-up), or the wait ended (drain)
#    1  not caught up yet (caught-up)
#    2  bad invocation: a variable missing or malformed, no such subcommand
set -eu

PROG=litestream-position
EX_NOT_YET=1
EX_USAGE=2

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info

usage() {
    info "$1"
    exit "$EX_USAGE"
}

DB_PATH=${DB_PATH:-}
REPLICA_DIR=${REPLICA_DIR:-}
SETTLE_SECONDS=${SETTLE_SECONDS:-3}
MAX_SECONDS=${MAX_SECONDS:-10}
case "$DB_PATH" in /*) ;; *) usage "DB_PATH must be an absolute path (got '$DB_PATH')." ;; esac
case "$REPLICA_DIR" in /*) ;; *) usage "REPLICA_DIR must be an absolute path (got '$REPLICA_DIR')." ;; esac
for pv_value in "$SETTLE_SECONDS" "$MAX_SECONDS"; do
    case "$pv_value" in '' | *[!0-9]* | 0?*) usage "SETTLE_SECONDS and MAX_SECONDS must be whole seconds." ;; esac
done
STATE_DIR="${DB_PATH%/*}/.${DB_PATH##*/}-litestream"
CATCH_UP_MARKER="${DB_PATH%/*}/.litestream-catch-up"

# newest_name DIR: the name of the LTX file directly under DIR with the highest max TXID (empty if none). Names
# have equal width (<16 hex>-<16 hex>.ltx), so the highest is the last in the shell's sorted glob.
newest_name() {
    nn_name=
    for nn_file in "$1"/*.ltx; do
        [ -f "$nn_file" ] || continue
        case "${nn_file##*/}" in
            [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-*.ltx)
                nn_name=${nn_file##*/} ;;
        esac
    done
    printf '%s' "$nn_name"
}

# caught_up: 0 when the replica holds Litestream's newest local level-0 file, byte for byte. Only that counts: a
# file planted on the export at a higher position (which anyone who can write it can do) is not this database's
# newest write, and a name alone proves nothing.
caught_up() {
    [ -d "$STATE_DIR/ltx/0" ] || return 1
    cu_name=$(newest_name "$STATE_DIR/ltx/0")
    [ -n "$cu_name" ] || return 1
    cu_shipped="$REPLICA_DIR/ltx/0/$cu_name"
    [ -f "$cu_shipped" ] && [ ! -L "$cu_shipped" ] || return 1
    cmp -s "$STATE_DIR/ltx/0/$cu_name" "$cu_shipped"
}

case "${1:-}" in
    caught-up)
        if [ ! -e "$CATCH_UP_MARKER" ] || [ ! -s "$DB_PATH" ]; then
            exit 0 # not just restored (or no database yet): nothing the replica does not hold already
        fi
        if caught_up; then
            rm -f "$CATCH_UP_MARKER"
            exit 0
        fi
        info "not yet: Litestream has not shipped the database's newest position to '$REPLICA_DIR'."
        exit "$EX_NOT_YET"
        ;;
    drain)
        dr_started=$(date -u +%s)
        dr_since=
        while :; do
            dr_now=$(date -u +%s)
            if [ ! -s "$DB_PATH" ]; then
                exit 0
            fi
            if caught_up; then
                dr_since=${dr_since:-$dr_now}
                if [ $((dr_now - dr_since)) -ge "$SETTLE_SECONDS" ]; then
                    info "the replica holds the last write ($(newest_name "$STATE_DIR/ltx/0")); stopping Litestream."
                    exit 0
                fi
            else
                dr_since=
            fi
            if [ $((dr_now - dr_started)) -ge "$MAX_SECONDS" ]; then
                info "warning: the replica had not caught up after ${MAX_SECONDS}s; stopping Litestream anyway (it \
ships what it can on SIGTERM)."
                exit 0
            fi
            sleep 1
        done
        ;;
    *) usage "usage: $0 caught-up|drain (see the header of this script)." ;;
esac
