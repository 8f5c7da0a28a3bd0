#!/bin/sh
# The signed manifest of a Litestream file replica: what binds the replica on the NFS backup export to this
# tailnet's writers, so a restore can tell a replica they wrote from one that anybody else who can write the export
# planted, swapped or rolled back.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh and busybox tools. Beyond what
# the other scripts already use (sha256sum, cut, tr, sed, sort, mktemp, date, ls, cp, wc), it uses awk and a
# fractional `sleep` (both busybox applets of the image; POSIX awk, no GNU extension), and never openssl.
#
#   sh litestream-manifest.sh run      the signer sidecar: signs the replica whenever its files change (checked every
#                                      SIGN_INTERVAL_SECONDS) and at least every HEARTBEAT_SECONDS; on SIGTERM it keeps
#                                      signing until the replica is still (Litestream ships its tail), then exits 0
#   sh litestream-manifest.sh sign     one signature of the replica as it is now
#   sh litestream-manifest.sh verify   checks the manifest and copies every signed file into COPY_DIR (a fresh local
#                                      directory): what Litestream then restores from is exactly what was verified
#   sh litestream-manifest.sh hmac     HMAC-SHA256 of stdin under KEY_FILE, as hex (what the tests compare with
#                                      `openssl dgst -sha256 -hmac`)
#
# Environment:
#   KEY_FILE          the tailnet's backup key (the Secret <app>-backup-key): 64 lowercase hex digits (surrounding
#                     whitespace ignored); the HMAC key
#                     is that text's 64 ASCII bytes, exactly SHA-256's block size (RFC 2104: used as is)
#   APP               the application (lowercase letters, digits, '-'); signed, so one application's manifest never
#                     authenticates another's directory
#   REPLICA_DIR       the Litestream file replica directory (absolute), e.g. /backup/headscale/replica
#   MANIFEST_FILE     the manifest (absolute), outside REPLICA_DIR, e.g. /backup/headscale/replica.manifest
#   COPY_DIR          verify: where the verified copy goes (absolute; created, must not exist)
#   MAX_AGE_SECONDS   verify, optional: refuse a manifest signed longer ago than this (the writer re-signs at least every
#                     HEARTBEAT_SECONDS while it runs, so an older one means the writer stopped that long ago or the
#                     replica was rolled back); unset or empty = no age check
#   ALLOW_STALE       verify, optional: today's UTC date (YYYY-MM-DD) accepts a manifest older than MAX_AGE_SECONDS on
#                     that date only (the dated override, like ALLOW_EMPTY_START of the restore)
#   MIN_TXID          verify, optional: 16 hex digits, a position this replica is known to have reached (a record
#                     kept outside the export); a signed position below it is a rollback (exit 44)
#   MIN_TXID_SOURCE   verify, optional: what MIN_TXID was read from, named in the refusal
#   ALLOW_ROLLBACK    verify, optional: today's UTC date (YYYY-MM-DD) accepts a signed position below MIN_TXID on that
#                     date only (the dated override after a deliberate return to an older replica)
#   POSITION_FILE     run, optional: after each signature, the highest position signed since this signer started is
#                     written there as "<16 hex txid> <signed_at>" (temp file, then rename): what the position
#                     recorder sidecar copies into the served witness, outside the export. Never lowered while the
#                     signer runs, so a replica rolled back under a running pod is never recorded as its position.
#   SIGN_INTERVAL_SECONDS  run: how often the replica's file names are compared (default 0.2; a fraction is fine)
#   HEARTBEAT_SECONDS  run: the longest time between two signatures, even with no change (default 60)
#   TERM_SETTLE_SECONDS  run: on SIGTERM, sign until the replica has not changed for this long (default 2), at most
#                     TERM_MAX_SECONDS (default 10)
#
# Manifest (text; written to a temp file beside it, then renamed, so a reader sees a whole one or the previous one):
#   headscale-ha-replica-manifest 1
#   app <APP>
#   signed_at <UTC epoch seconds>
#   txid <16 hex: the highest max TXID of the listed files, the signed position>
#   files <N>
#   f <level> <min>-<max>.ltx <size> <sha256>            N lines, sorted by level then name
#   hmac <64 hex>                                        HMAC-SHA256(key, every byte before this line)
#
# What verify accepts: the last line is the hmac line and the MAC matches (exit 41 otherwise), the body has exactly the
# form above (exit 42: truncated or malformed), app is APP, and every listed file that exists has its signed size and
# digest, checked on the copy (exit 43). A listed file that is gone is accepted only when a listed file of a higher
# level that exists covers its TXID range (Litestream deletes compacted files; the signer re-signs within a tick); the
# highest listed file must exist. Files the manifest does not list (the tail written after the last signature, or
# planted) are not copied: the restore reaches the signed position, never beyond it.
#
# Exit codes:
#    0  ok (verify: prints "txid=<hex> signed_at=<epoch> files=<N> unsigned=<M>" on stdout)
#    2  bad invocation: a variable missing or malformed, no such subcommand
#   40  the replica has files but there is no manifest: not written by this tailnet's writers (or before signing began)
#   41  the manifest's MAC does not verify under this key: written by someone without the key, or by another tailnet
#   42  the manifest is truncated or malformed (or is not a regular file)
#   43  the replica does not match its manifest: a file differs from its signed digest or size (swapped, modified), a
#       needed file is gone, or the manifest was signed for another application
#   44  the signed position is too old: signed longer than MAX_AGE_SECONDS ago, or below MIN_TXID (rolled back)
#   45  KEY_FILE is missing, unreadable or not 64 lowercase hex digits
#   46  the replica or the copy cannot be read or written (I/O, permissions, space)
#
# Never run with `set -x`: the key passes through shell variables (never through any process's argv: printf is a
# builtin). Messages never show key material or a MAC; they name files and positions only.
set -eu

PROG=litestream-manifest
EX_USAGE=2
EX_UNSIGNED=40
EX_FORGED=41
EX_MALFORMED=42
EX_TAMPERED=43
EX_STALE=44
EX_KEY=45
EX_IO=46
MAGIC="headscale-ha-replica-manifest 1"

info() {
    printf '%s: %s\n' "$PROG" "$1" >&2
}

die() {
    printf '%s: REFUSED (exit %s): %s\n' "$PROG" "$1" "$2" >&2
    exit "$1"
}

require_absolute() {
    case "$2" in
        /*) ;;
        *) die "$EX_USAGE" "$1 must be an absolute path (got '$2')." ;;
    esac
}

# --- HMAC-SHA256 (RFC 2104) from sha256sum ------------------------------------------------------------------
# hex_value CHAR: the value of one lowercase hex digit (the callers checked the form).
hex_value() {
    case "$1" in
        [0-9]) HV=$1 ;;
        a) HV=10 ;;
        b) HV=11 ;;
        c) HV=12 ;;
        d) HV=13 ;;
        e) HV=14 ;;
        f) HV=15 ;;
    esac
}

# is_hex TEXT LENGTH: whether TEXT is exactly LENGTH lowercase hex digits.
is_hex() {
    case "$1" in
        *[!0-9a-f]*) return 1 ;;
    esac
    [ "${#1}" -eq "$2" ]
}

# octal BYTE: printf's escape for one byte, without a fork.
octal() {
    OC="\\$(($1 / 64))$(($1 / 8 % 8))$(($1 % 8))"
}

# load_key: KEY_IPAD and KEY_OPAD, the key XOR 0x36 and XOR 0x5c as printf escapes (64 bytes each). Without a
# process (the signer reloads the key at every signature): the key is the file's first line, blanks trimmed.
LOADED_KEY=
load_key() {
    [ -n "${KEY_FILE:-}" ] || die "$EX_KEY" "KEY_FILE is not set: the backup key (the Secret <app>-backup-key) \
is not mounted. Check the container's volume mounts."
    lk_key=
    if [ ! -f "$KEY_FILE" ] || [ ! -r "$KEY_FILE" ] || { ! IFS= read -r lk_key <"$KEY_FILE" && [ -z "$lk_key" ]; }; then
        die "$EX_KEY" "The backup key file KEY_FILE='$KEY_FILE' is missing, unreadable or empty. Check the Secret \
<app>-backup-key and its volume mount."
    fi
    lk_key="${lk_key#"${lk_key%%[![:space:]]*}"}"
    lk_key="${lk_key%"${lk_key##*[![:space:]]}"}"
    [ "$lk_key" != "$LOADED_KEY" ] || return 0
    case "$lk_key" in
        *[!0-9a-f]*) lk_ok=false ;;
        *) if [ "${#lk_key}" -eq 64 ]; then lk_ok=true; else lk_ok=false; fi ;;
    esac
    # Its content is never shown.
    [ "$lk_ok" = true ] || die "$EX_KEY" "The backup key file '$KEY_FILE' does not hold 64 lowercase hex digits. \
Check the Secret <app>-backup-key."
    LOADED_KEY=$lk_key
    KEY_IPAD=
    KEY_OPAD=
    while [ -n "$lk_key" ]; do
        lk_char=${lk_key%"${lk_key#?}"}
        lk_key=${lk_key#?}
        case "$lk_char" in
            [0-9]) lk_code=$((48 + lk_char)) ;;
            *) hex_value "$lk_char" && lk_code=$((87 + HV)) ;;
        esac
        octal $((lk_code ^ 54))
        KEY_IPAD="$KEY_IPAD$OC"
        octal $((lk_code ^ 92))
        KEY_OPAD="$KEY_OPAD$OC"
    done
}

# hmac_file FILE: HMAC-SHA256 of FILE's bytes under the loaded key, as 64 hex digits.
hmac_file() {
    # shellcheck disable=SC2059 # the escapes are the format on purpose: printf turns them into the pad bytes
    hf_inner=$({ printf "$KEY_IPAD" && cat "$1"; } | sha256sum) || return 1
    hf_inner=${hf_inner%% *}
    hf_escapes=
    while [ -n "$hf_inner" ]; do
        hf_pair=${hf_inner%"${hf_inner#??}"}
        hf_inner=${hf_inner#??}
        hex_value "${hf_pair%?}"
        hf_high=$HV
        hex_value "${hf_pair#?}"
        octal $((hf_high * 16 + HV))
        hf_escapes="$hf_escapes$OC"
    done
    # shellcheck disable=SC2059 # as above: the inner digest's bytes
    hf_outer=$({ printf "$KEY_OPAD" && printf "$hf_escapes"; } | sha256sum) || return 1
    printf '%s\n' "${hf_outer%% *}"
}

# --- common inputs --------------------------------------------------------------------------------------------
replica_inputs() {
    APP=${APP:-}
    REPLICA_DIR=${REPLICA_DIR:-}
    MANIFEST_FILE=${MANIFEST_FILE:-}
    case "$APP" in
        '' | *[!a-z0-9-]*) die "$EX_USAGE" "APP must be lowercase letters, digits and '-' (got '$APP')." ;;
    esac
    require_absolute REPLICA_DIR "$REPLICA_DIR"
    require_absolute MANIFEST_FILE "$MANIFEST_FILE"
    REPLICA_DIR=${REPLICA_DIR%/}
    case "$MANIFEST_FILE" in
        "$REPLICA_DIR"/*) die "$EX_USAGE" "MANIFEST_FILE '$MANIFEST_FILE' must be outside REPLICA_DIR \
'$REPLICA_DIR' (Litestream owns that directory)." ;;
    esac
}

# is_ltx_name NAME: whether NAME is an LTX file's name, <16 hex>-<16 hex>.ltx.
is_ltx_name() {
    iln_min=${1%%-*}
    iln_max=${1#*-}
    [ "$iln_max" != "$1" ] && [ "${iln_max%.ltx}" != "$iln_max" ] && is_hex "$iln_min" 16 && is_hex "${iln_max%.ltx}" 16
}

# ltx_files: "<level> <name>" of every LTX file of the replica, sorted; Litestream's temp files (*.tmp) are not.
ltx_files() {
    for lf_dir in "$REPLICA_DIR"/ltx/[0-9]; do
        [ -d "$lf_dir" ] || continue
        for lf_file in "$lf_dir"/*.ltx; do
            [ -f "$lf_file" ] || continue
            if is_ltx_name "${lf_file##*/}"; then
                printf '%s %s\n' "${lf_dir##*/}" "${lf_file##*/}"
            fi
        done
    done
}

# --- sign -----------------------------------------------------------------------------------------------------
# The digest cache of the signer: "<path> <inode> <size> <sha256>" lines. Litestream writes each LTX file to
# "<name>.tmp" and renames it, so a file's inode and size identify its content; a rewritten file is a new inode.
CACHE=
SIGNED_TXID=
SIGNED_AT=
RECORDED_TXID=
SIGN_WORK=
# The pod's name (its UTS namespace's host name), or the process id.
SIGNER_ID=$$
if [ -r /proc/sys/kernel/hostname ] && IFS= read -r SIGNER_ID </proc/sys/kernel/hostname; then :; fi
case "$SIGNER_ID" in '' | *[!A-Za-z0-9.-]*) SIGNER_ID=$$ ;; esac

# sign_now: write the manifest of the replica as it is now (nothing when it has no LTX file yet). A handful of
# processes whatever the replica's size (ls, awk, sha256sum of the new files only, the HMAC): the signer runs often.
sign_now() {
    set -- "$REPLICA_DIR"/ltx/[0-9]/*.ltx
    [ -e "$1" ] || return 0
    if [ -z "$SIGN_WORK" ]; then
        SIGN_WORK=$(mktemp -d "${TMPDIR:-/tmp}/sign.XXXXXX") || return 1
    fi
    sn_work=$SIGN_WORK
    rm -f "$sn_work/todo" "$sn_work/known" "$sn_work/sums"
    # A file compacted away between the glob and ls is reported by ls and left out.
    # shellcheck disable=SC2012 # inode and size of Litestream's own files (hex names, no blanks)
    ls -lnid -- "$@" >"$sn_work/ls" 2>/dev/null || true
    [ -n "$CACHE" ] || CACHE="$sn_work/no-cache"
    [ -f "$CACHE" ] || : >"$CACHE"
    # ls -lnid: inode mode links uid gid size <date> path; LTX names only (<16 hex>-<16 hex>.ltx, level 0-9).
    if ! awk -v cache="$CACHE" -v todo="$sn_work/todo" -v known="$sn_work/known" -v root="$REPLICA_DIR/ltx/" '
        BEGIN {
            h = "[0-9a-f]"; t = h h h h h h h h h h h h h h h h
            name = "^[0-9]/" t "-" t "[.]ltx$"
            while ((getline line < cache) > 0) { split(line, f, " "); sums[f[1] " " f[2] " " f[3]] = f[4] }
        }
        {
            path = $NF
            if (substr(path, 1, length(root)) != root || substr(path, length(root) + 1) !~ name) next
            key = path " " $1 " " $6
            if (key in sums) print key " " sums[key] > known; else print key > todo
        }' "$sn_work/ls"; then
        return 1
    fi
    if [ -s "$sn_work/todo" ]; then
        # shellcheck disable=SC2046 # paths of Litestream's own files: no blanks, split on purpose
        if ! sha256sum $(cut -d ' ' -f 1 "$sn_work/todo") >"$sn_work/sums" 2>/dev/null; then
            return 1
        fi
        awk 'NR == FNR { sum[$2] = $1; next } ($1 in sum) { print $0 " " sum[$1] }' "$sn_work/sums" \
            "$sn_work/todo" >>"$sn_work/known"
    fi
    [ -s "$sn_work/known" ] || return 0
    awk -v root="$REPLICA_DIR/ltx/" '{ rel = substr($1, length(root) + 1); split(rel, p, "/");
        print "f " p[1] " " p[2] " " $3 " " $4 }' "$sn_work/known" | sort >"$sn_work/lines"
    # shellcheck disable=SC2046 # two words: the highest TXID and the number of files
    set -- $(awk '{ t = substr($3, 18, 16); if (t "" > max "") max = t } END { print max, NR }' "$sn_work/lines")
    sn_max=$1
    # Written under umask 022 (0644: the manifest is not secret) beside the manifest, then renamed over it; the
    # name is this container's own (two pods of a partition never share a temp file).
    sn_body="$MANIFEST_FILE.tmp.$SIGNER_ID.$$"
    sn_at=$(date -u +%s)
    if (umask 022 && printf '%s\napp %s\nsigned_at %s\ntxid %s\nfiles %s\n' "$MAGIC" "$APP" "$sn_at" \
        "$sn_max" "$2" >"$sn_body") && cat "$sn_work/lines" >>"$sn_body" && sn_mac=$(hmac_file "$sn_body") &&
        printf 'hmac %s\n' "$sn_mac" >>"$sn_body" && mv -f "$sn_body" "$MANIFEST_FILE"; then
        if [ "$CACHE" != "$sn_work/no-cache" ]; then
            mv -f "$sn_work/known" "$CACHE"
        fi
        SIGNED_TXID=$sn_max
        SIGNED_AT=$sn_at
        return 0
    fi
    rm -f "$sn_body"
    return 1
}

# record_position: the highest position signed since this signer started, into POSITION_FILE (when set). A failure
# is reported and retried at the next signature: it never stops the signing.
record_position() {
    [ -n "$POSITION_FILE" ] && [ -n "$SIGNED_TXID" ] || return 0
    if [ -n "$RECORDED_TXID" ] && [ $((0x$SIGNED_TXID)) -le $((0x$RECORDED_TXID)) ]; then
        return 0
    fi
    if printf '%s %s\n' "$SIGNED_TXID" "$SIGNED_AT" >"$POSITION_FILE.tmp" && mv -f "$POSITION_FILE.tmp" "$POSITION_FILE"
    then
        RECORDED_TXID=$SIGNED_TXID
    else
        info "warning: could not write the position file '$POSITION_FILE'; retrying at the next signature."
    fi
}

# listing_state: the names of the replica's files, without a process: a new LTX file is a new name (Litestream's
# files are named by their TXID range), compaction and retention remove names. A rewrite under the same name is
# caught by the heartbeat's signature (a new inode).
listing_state() {
    ls_state=
    for ls_file in "$REPLICA_DIR"/ltx/[0-9]/*.ltx; do
        ls_state="$ls_state ${ls_file#"$REPLICA_DIR"/ltx/}"
    done
    LISTING_STATE=$ls_state
}

positive_seconds() {
    case "$2" in
        '' | *[!0-9]* | 0*) die "$EX_USAGE" "$1 must be a positive whole number of seconds (got '$2')." ;;
    esac
}

# The poll interval may be a fraction (busybox and coreutils sleep take one): 0.2, 1, 2.5.
positive_interval() {
    case "$2" in
        '' | *[!0-9.]* | *.*.* | .* | *. | 0 | 0.0*[!1-9]* | 0.0) die "$EX_USAGE" "$1 must be a positive number \
of seconds such as 0.2 or 1 (got '$2')." ;;
    esac
}

run_signer() {
    POSITION_FILE=${POSITION_FILE:-}
    [ -z "$POSITION_FILE" ] || require_absolute POSITION_FILE "$POSITION_FILE"
    SIGN_INTERVAL_SECONDS=${SIGN_INTERVAL_SECONDS:-0.2}
    HEARTBEAT_SECONDS=${HEARTBEAT_SECONDS:-60}
    TERM_SETTLE_SECONDS=${TERM_SETTLE_SECONDS:-2}
    TERM_MAX_SECONDS=${TERM_MAX_SECONDS:-10}
    positive_interval SIGN_INTERVAL_SECONDS "$SIGN_INTERVAL_SECONDS"
    positive_seconds HEARTBEAT_SECONDS "$HEARTBEAT_SECONDS"
    positive_seconds TERM_SETTLE_SECONDS "$TERM_SETTLE_SECONDS"
    positive_seconds TERM_MAX_SECONDS "$TERM_MAX_SECONDS"
    CACHE=$(mktemp "${TMPDIR:-/tmp}/manifest-cache.XXXXXX") || die "$EX_IO" "Could not create the digest cache \
in ${TMPDIR:-/tmp}. Check the container's /tmp volume."
    STOPPING=false
    SLEEPER=
    trap 'STOPPING=true; if [ -n "$SLEEPER" ]; then kill "$SLEEPER" 2>/dev/null || true; fi' TERM INT
    # The heartbeat is counted in polls: no clock read (a process) on every poll.
    rs_polls=$(awk -v h="$HEARTBEAT_SECONDS" -v i="$SIGN_INTERVAL_SECONDS" 'BEGIN { n = int(h / i); print (n < 1 ? 1 : n) }')
    rs_since=$rs_polls
    rs_state=
    info "signing the replica '$REPLICA_DIR' of $APP into '$MANIFEST_FILE' (every ${SIGN_INTERVAL_SECONDS}s on change, \
at least every ${HEARTBEAT_SECONDS}s)."
    while [ "$STOPPING" = false ]; do
        listing_state
        rs_now_state=$LISTING_STATE
        rs_since=$((rs_since + 1))
        if [ "$rs_now_state" != "$rs_state" ] || [ "$rs_since" -ge "$rs_polls" ]; then
            # Read at every signature: a rotated key reaches the signer when the kubelet refreshes the Secret.
            load_key
            if sign_now; then
                record_position
                rs_state=$rs_now_state
                rs_since=0
            else
                info "warning: could not sign the replica '$REPLICA_DIR' (NFS export, permissions, space?); retrying."
            fi
        fi
        sleep "$SIGN_INTERVAL_SECONDS" &
        SLEEPER=$!
        wait "$SLEEPER" 2>/dev/null || true
        SLEEPER=
    done
    # Stopping: Litestream ships its tail on its own SIGTERM; keep signing until the replica is still.
    rs_started=$(date -u +%s)
    rs_still_since=$rs_started
    rs_state=
    while :; do
        listing_state
        rs_now_state=$LISTING_STATE
        rs_now=$(date -u +%s)
        if [ "$rs_now_state" != "$rs_state" ]; then
            if sign_now; then
                record_position
            else
                info "warning: could not sign the replica '$REPLICA_DIR' while stopping."
            fi
            rs_state=$rs_now_state
            rs_still_since=$rs_now
        elif [ $((rs_now - rs_still_since)) -ge "$TERM_SETTLE_SECONDS" ]; then
            break
        fi
        if [ $((rs_now - rs_started)) -ge "$TERM_MAX_SECONDS" ]; then
            info "warning: the replica was still changing after ${TERM_MAX_SECONDS}s; stopping with the last signature."
            break
        fi
        sleep 1
    done
    rm -f "$CACHE"
    rm -rf "$SIGN_WORK"
    info "stopped; the manifest covers txid ${SIGNED_TXID:-none}."
}

# --- verify ---------------------------------------------------------------------------------------------------
# manifest_field NAME LINE: the value of "NAME <value>", or fail.
MANIFEST_VALUE=
manifest_field() {
    case "$2" in
        "$1 "*) MANIFEST_VALUE=${2#"$1 "} ;;
        *) return 1 ;;
    esac
}

malformed() {
    die "$EX_MALFORMED" "The manifest '$MANIFEST_FILE' is truncated or malformed ($1). It is written whole by the \
signer sidecar (temp file, then rename), so this is damage or tampering: inspect the NFS backup export (who wrote \
it?). Restore '$MANIFEST_FILE' and the replica from a copy you trust."
}

verify() {
    COPY_DIR=${COPY_DIR:-}
    MAX_AGE_SECONDS=${MAX_AGE_SECONDS:-}
    ALLOW_STALE=${ALLOW_STALE:-}
    MIN_TXID=${MIN_TXID:-}
    ALLOW_ROLLBACK=${ALLOW_ROLLBACK:-}
    require_absolute COPY_DIR "$COPY_DIR"
    [ -z "$MAX_AGE_SECONDS" ] || positive_seconds MAX_AGE_SECONDS "$MAX_AGE_SECONDS"
    if [ -n "$MIN_TXID" ] && ! is_hex "$MIN_TXID" 16; then
        die "$EX_USAGE" "MIN_TXID must be 16 lowercase hex digits (got '$MIN_TXID')."
    fi
    today=$(date -u +%Y-%m-%d)
    case "$ALLOW_STALE" in
        '' | [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]) ;;
        *) die "$EX_USAGE" "ALLOW_STALE must be empty or a UTC date YYYY-MM-DD (got '$ALLOW_STALE')." ;;
    esac
    case "$ALLOW_ROLLBACK" in
        '' | [0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]) ;;
        *) die "$EX_USAGE" "ALLOW_ROLLBACK must be empty or a UTC date YYYY-MM-DD (got '$ALLOW_ROLLBACK')." ;;
    esac
    load_key
    if [ -e "$COPY_DIR" ] || [ -L "$COPY_DIR" ]; then
        die "$EX_USAGE" "COPY_DIR '$COPY_DIR' exists already; the verified copy goes into a fresh directory."
    fi
    if [ -L "$MANIFEST_FILE" ] || { [ -e "$MANIFEST_FILE" ] && [ ! -f "$MANIFEST_FILE" ]; }; then
        malformed "it is a link or not a regular file; it is never followed"
    fi
    if [ ! -e "$MANIFEST_FILE" ]; then
        die "$EX_UNSIGNED" "The replica in '$REPLICA_DIR' has no manifest '$MANIFEST_FILE': nothing says this \
tailnet's writers wrote it. It may be planted (anyone who can write the NFS export can put a replica there), or \
older than backup signing. Inspect the export; if you trust this replica (the upgrade that introduced signing, a key \
rotation), set backup.auth.allowUnsigned to today's UTC date ($today) and run pulumi up, then remove it."
    fi
    # A private copy of the manifest: what is checked is what is used.
    mkdir "$COPY_DIR" || die "$EX_IO" "Could not create the copy directory '$COPY_DIR'. Check the local volume."
    v_manifest="$COPY_DIR/manifest"
    cp "$MANIFEST_FILE" "$v_manifest" 2>/dev/null || die "$EX_IO" "The manifest '$MANIFEST_FILE' cannot be read. \
Check the NFS backup volume and its permissions."
    v_last=$(tail -n 1 "$v_manifest")
    if ! manifest_field hmac "$v_last" || ! is_hex "$MANIFEST_VALUE" 64; then
        malformed "its last line is not the MAC line"
    fi
    # $(...) drops one trailing newline: anything left is a last line cut before its end.
    [ -z "$(tail -c 1 "$v_manifest")" ] || malformed "its last line has no end"
    v_mac=$MANIFEST_VALUE
    # The body: every line before the MAC line (the MAC line is the file's last, with its newline).
    v_lines=$(wc -l <"$v_manifest" | tr -d ' ')
    head -n $((v_lines - 1)) "$v_manifest" >"$COPY_DIR/body" || die "$EX_IO" "Could not write '$COPY_DIR/body'."
    if [ "$(hmac_file "$COPY_DIR/body")" != "$v_mac" ]; then
        die "$EX_FORGED" "The manifest '$MANIFEST_FILE' does not carry this tailnet's signature (its MAC does not \
verify under the backup key). It was written by someone without this tailnet's key, or by another tailnet's \
writers, or modified. Not restoring it. Inspect the NFS export (who wrote it?) and restore '$REPLICA_DIR' and its \
manifest from a copy you trust; after a key rotation, see backup.auth.allowUnsigned (docs/security.md)."
    fi
    # Authentic from here on: parse it strictly all the same.
    v_n=0
    v_app=
    v_signed_at=
    v_txid=
    v_count=
    v_files=0
    : >"$COPY_DIR/files"
    while IFS= read -r v_line; do
        v_n=$((v_n + 1))
        case "$v_n" in
            1) [ "$v_line" = "$MAGIC" ] || malformed "line 1 is not '$MAGIC'" ;;
            2) manifest_field app "$v_line" || malformed "line 2 is not the app"
               v_app=$MANIFEST_VALUE ;;
            3) manifest_field signed_at "$v_line" || malformed "line 3 is not signed_at"
               v_signed_at=$MANIFEST_VALUE ;;
            4) if ! manifest_field txid "$v_line" || ! is_hex "$MANIFEST_VALUE" 16; then
                   malformed "line 4 is not the txid"
               fi
               v_txid=$MANIFEST_VALUE ;;
            5) manifest_field files "$v_line" || malformed "line 5 is not the file count"
               v_count=$MANIFEST_VALUE ;;
            *)
                # shellcheck disable=SC2086 # split into fields on purpose
                set -- $v_line
                if [ "$#" -ne 5 ] || [ "$1" != f ]; then
                    malformed "line $v_n is not a file line"
                fi
                case "$2" in [0-9]) ;; *) malformed "line $v_n has no level 0-9" ;; esac
                is_ltx_name "$3" || malformed "line $v_n does not name an LTX file"
                case "$4" in '' | *[!0-9]*) malformed "line $v_n has no size" ;; esac
                is_hex "$5" 64 || malformed "line $v_n has no digest"
                printf '%s %s %s %s\n' "$2" "$3" "$4" "$5" >>"$COPY_DIR/files"
                v_files=$((v_files + 1))
                ;;
        esac
    done <"$COPY_DIR/body"
    [ "$v_n" -ge 5 ] || malformed "it has only $v_n lines before the MAC"
    case "$v_signed_at" in '' | *[!0-9]*) malformed "signed_at is not a time" ;; esac
    case "$v_count" in '' | *[!0-9]*) malformed "the file count is not a number" ;; esac
    [ "$v_count" -eq "$v_files" ] || malformed "it says $v_count files and lists $v_files"
    [ "$v_files" -gt 0 ] || malformed "it lists no file"
    if [ "$v_app" != "$APP" ]; then
        die "$EX_TAMPERED" "The manifest '$MANIFEST_FILE' is this tailnet's, but signed for the application '$v_app', \
not $APP: another application's replica was put in this directory. Put each replica back in its own directory."
    fi
    # The position first: a rolled-back replica is refused before its files are read.
    v_now=$(date -u +%s)
    v_age=$((v_now - v_signed_at))
    if [ -n "$MIN_TXID" ] && [ $((0x$v_txid)) -lt $((0x$MIN_TXID)) ]; then
        if [ "$ALLOW_ROLLBACK" != "$today" ]; then
            if [ -n "$ALLOW_ROLLBACK" ]; then
                info "warning: ALLOW_ROLLBACK=$ALLOW_ROLLBACK is not today's date ($today, UTC), so it has no effect."
            fi
            die "$EX_STALE" "The replica's signed position (txid $v_txid) is below the position $MIN_TXID this replica \
is known to have reached (${MIN_TXID_SOURCE:-MIN_TXID}): it was rolled back (an NFS snapshot, an older copy), which \
would bring back deleted nodes and revoked keys. Not restoring an older node registry. Restore the newest copy of \
'$REPLICA_DIR'; only if this older state is wanted, set backup.auth.allowRollback to today's UTC date ($today) and \
run pulumi up, then remove it."
        fi
        info "!!! OVERRIDE: ALLOW_ROLLBACK=$ALLOW_ROLLBACK (today): restoring the signed position txid $v_txid, BELOW \
the position $MIN_TXID this replica had reached. Remove backup.auth.allowRollback now."
    elif [ -n "$ALLOW_ROLLBACK" ] && [ "$ALLOW_ROLLBACK" != "$today" ]; then
        info "warning: ALLOW_ROLLBACK=$ALLOW_ROLLBACK is not today's date ($today, UTC), so it has no effect. Remove \
backup.auth.allowRollback from the stack config."
    fi
    if [ -n "$MAX_AGE_SECONDS" ] && [ "$v_age" -gt "$MAX_AGE_SECONDS" ]; then
        if [ "$ALLOW_STALE" != "$today" ]; then
            die "$EX_STALE" "The replica's manifest was signed $v_age s ago (txid $v_txid), more than the \
$MAX_AGE_SECONDS s allowed (backup.auth.maxAge): the writer re-signs at least every minute while it runs, so either \
it has been stopped that long, or this is an older state of the replica (an NFS snapshot rollback, a copied old \
directory), which would bring back deleted nodes and revoked keys. If the writer was really stopped since then \
(check when $APP last ran), set backup.auth.allowStale to today's UTC date ($today) and run pulumi up, then remove \
it; otherwise restore the newest copy of '$REPLICA_DIR'."
        fi
        info "warning: ALLOW_STALE=$ALLOW_STALE (today): restoring a manifest signed $v_age s ago (txid $v_txid). \
Remove backup.auth.allowStale once the pod has started."
    elif [ -n "$ALLOW_STALE" ] && [ "$ALLOW_STALE" != "$today" ]; then
        info "warning: ALLOW_STALE=$ALLOW_STALE is not today's date ($today, UTC), so it has no effect. Remove \
backup.auth.allowStale from the stack config."
    fi
    # Copy every signed file that exists, then check the copy: the restore reads only what was checked here.
    v_missing=
    while read -r v_level v_name _; do
        v_src="$REPLICA_DIR/ltx/$v_level/$v_name"
        if [ -L "$v_src" ]; then
            die "$EX_TAMPERED" "The replica file '$v_src' is a symbolic link; the replica's files are never followed \
through links. Inspect the NFS export."
        fi
        if [ ! -e "$v_src" ]; then
            v_missing="$v_missing$v_level $v_name
"
            continue
        fi
        [ -d "$COPY_DIR/ltx/$v_level" ] || mkdir -p "$COPY_DIR/ltx/$v_level" || die "$EX_IO" "Could not create \
'$COPY_DIR/ltx/$v_level'."
        cp "$v_src" "$COPY_DIR/ltx/$v_level/$v_name" 2>/dev/null || die "$EX_IO" "Could not copy '$v_src' (NFS \
volume, permissions, or the local volume is full)."
    done <"$COPY_DIR/files"
    # The copies' digests against the signed ones (a different size is a different digest), in one pass.
    if [ -d "$COPY_DIR/ltx" ]; then
        (cd "$COPY_DIR/ltx" && sha256sum -- [0-9]/*.ltx) >"$COPY_DIR/sums" || die "$EX_IO" "Could not hash the \
copies in '$COPY_DIR'."
    else
        : >"$COPY_DIR/sums"
    fi
    v_bad=$(awk 'NR == FNR { sum[$2] = $1; next } ($1 "/" $2) in sum && sum[$1 "/" $2] != $4 { print $1 "/" $2; exit }' \
        "$COPY_DIR/sums" "$COPY_DIR/files")
    if [ -n "$v_bad" ]; then
        die "$EX_TAMPERED" "The replica file '$REPLICA_DIR/ltx/$v_bad' is not the file this tailnet's writer signed \
(its digest differs from the manifest's): it was swapped or modified, e.g. with a file of another tailnet's \
replica. Not restoring. Inspect the NFS export and restore '$REPLICA_DIR' from a copy you trust."
    fi
    # A signed file that is gone is harmless only when a copied file of a higher level covers its range.
    printf '%s' "$v_missing" >"$COPY_DIR/missing"
    while read -r m_level m_name; do
        [ -n "$m_level" ] || continue
        m_min=${m_name%%-*}
        m_max=${m_name#*-}
        m_max=${m_max%.ltx}
        m_covered=false
        for c_file in "$COPY_DIR"/ltx/*/*.ltx; do
            [ -f "$c_file" ] || continue
            c_level=${c_file%/*}
            c_level=${c_level##*/}
            c_name=${c_file##*/}
            c_min=${c_name%%-*}
            c_max=${c_name#*-}
            c_max=${c_max%.ltx}
            if [ "$c_level" -gt "$m_level" ] && [ $((0x$c_min)) -le $((0x$m_min)) ] &&
                [ $((0x$c_max)) -ge $((0x$m_max)) ]; then
                m_covered=true
                break
            fi
        done
        if [ "$m_covered" = false ]; then
            die "$EX_TAMPERED" "The signed replica file '$REPLICA_DIR/ltx/$m_level/$m_name' is gone and no other \
signed file covers its transactions: restoring without it would silently lose them (or stop at an older state). \
Restore '$REPLICA_DIR' from a copy of the NFS backup volume."
        fi
    done <"$COPY_DIR/missing"
    v_unsigned=$(ltx_files | awk 'NR == FNR { signed[$1 " " $2] = 1; next } !(($1 " " $2) in signed) { n++ }
        END { print n + 0 }' "$COPY_DIR/files" -)
    rm -f "$COPY_DIR/manifest" "$COPY_DIR/body" "$COPY_DIR/files" "$COPY_DIR/missing" "$COPY_DIR/sums"
    if [ "$v_unsigned" -gt 0 ]; then
        info "$v_unsigned LTX file(s) of the replica are not in the manifest (written after its last signature, or \
planted): not restored; the restore stops at the signed position txid $v_txid."
    fi
    printf 'txid=%s signed_at=%s files=%s unsigned=%s\n' "$v_txid" "$v_signed_at" "$v_files" "$v_unsigned"
}

# --- main -----------------------------------------------------------------------------------------------------
case "${1:-}" in
    hmac)
        load_key
        h_tmp=$(mktemp "${TMPDIR:-/tmp}/hmac.XXXXXX") || die "$EX_IO" "Could not create a temp file."
        cat >"$h_tmp"
        hmac_file "$h_tmp" || {
            rm -f "$h_tmp"
            exit "$EX_IO"
        }
        rm -f "$h_tmp"
        ;;
    sign)
        replica_inputs
        load_key
        sign_now || die "$EX_IO" "Could not sign the replica '$REPLICA_DIR' into '$MANIFEST_FILE'."
        rm -rf "$SIGN_WORK"
        ;;
    run)
        replica_inputs
        load_key
        run_signer
        ;;
    verify)
        replica_inputs
        verify
        ;;
    *) die "$EX_USAGE" "usage: $0 run|sign|verify|hmac (see the header of this script)." ;;
esac
