#!/bin/sh
# The signed manifest of a Litestream file replica: what binds the replica on the NFS backup export to this
# tailnet's writers, so a restore can tell a replica they wrote from one that anybody else who can write the export
# planted, swapped or rolled back.
#
# Runs in litestream/litestream (a POSIX sh and busybox-compatible tools + litestream), so: POSIX sh only. Beyond what
# the other scripts already use (sha256sum, cut, tr, sed, sort, mktemp, date, ls, cp, wc), it uses awk, od (an LTX
# header's 32 bytes) and timeout (a bounded read) (POSIX awk, no GNU extension), and never openssl. The signer
# (litestream-sign.sh) sources it with MANIFEST_LIBRARY=1 for the key, the MAC and the LTX header checks.
#
#   sh litestream-manifest.sh verify   checks the manifest and copies every signed file into COPY_DIR (a fresh local
#                                      directory): what Litestream then restores from is exactly what was verified
#   sh litestream-manifest.sh hmac     HMAC-SHA256 of stdin under KEY_FILE, as hex (what the tests compare with
#                                      `openssl dgst -sha256 -hmac`)
#   sh litestream-manifest.sh snapshot-mac FROM TO SHA256
#                                      the MAC of a pre-upgrade snapshot of APP (litestream-pre-upgrade.sh writes it
#                                      to <snapshot dir>/headscale.sqlite.hmac): HMAC-SHA256 under KEY_FILE of the
#                                      lines "headscale-ha-pre-upgrade-snapshot 1", "app APP", "from FROM", "to TO",
#                                      "sha256 SHA256"
#   sh litestream-manifest.sh check-snapshot DIR
#                                      whether DIR (<backup dir>/pre-upgrade/<from>-<to>) holds a snapshot of APP this
#                                      tailnet's writer took: its headscale.sqlite has the digest its .hmac was
#                                      computed over, for that from and to (exit 0; 41: no MAC beside it; 43: the
#                                      MAC does not verify, so the database or the MAC was swapped or edited)
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
#   CLOCK_SKEW_SECONDS  verify, optional: how far in the future a signed_at may be (default 300); beyond: exit 44
#   READ_TIMEOUT_SECONDS  verify, optional: the longest read of one signed file (default 300); beyond: exit 47
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
# form above (exit 42: truncated or malformed), app is APP, signed_at is at most CLOCK_SKEW_SECONDS in the future and
# (with MAX_AGE_SECONDS) not older, the position is not below MIN_TXID (TXIDs compared as unsigned 64-bit numbers; exit
# 44), and every file the restore needs (the newest signed snapshot, level 9, and every signed file ending after it)
# that exists is a regular file (exit 47), read within READ_TIMEOUT_SECONDS (exit 47), has its signed size and digest,
# checked on the copy, and a header naming the TXID range of its name (exit 43: swapped, modified or renamed). A needed
# file that is gone is accepted only when a copied file of a higher level covers its TXID range (Litestream deletes
# compacted files; the signer re-signs within a tick). Files the manifest does not list (the tail written after the
# last signature, or planted) are not copied: the restore reaches the signed position, never beyond it. The copy also
# gets "signed" (every listed "<level> <name>") and "baseline" (the needed files' "<level> <name> <sha256>") for the
# restore, which moves unlisted files above the position out of Litestream's way and hands the baseline to the signer.
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
#   47  a signed file the restore needs is not a regular file (a FIFO, device, socket or directory at its name), or
#       reading it did not end within READ_TIMEOUT_SECONDS
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
EX_NOT_REGULAR=47
MAGIC="headscale-ha-replica-manifest 1"

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info die require_absolute

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
# app_input: APP, checked (the application a manifest or a snapshot MAC is signed for).
app_input() {
    APP=${APP:-}
    case "$APP" in
        '' | *[!a-z0-9-]*) die "$EX_USAGE" "APP must be lowercase letters, digits and '-' (got '$APP')." ;;
    esac
}

replica_inputs() {
    app_input
    REPLICA_DIR=${REPLICA_DIR:-}
    MANIFEST_FILE=${MANIFEST_FILE:-}
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

# ltx_files: "<level> <name>" of every entry at an LTX name in the replica (whatever its type), sorted; Litestream's
# temp files (*.tmp) are not.
ltx_files() {
    for lf_dir in "$REPLICA_DIR"/ltx/[0-9]; do
        [ -d "$lf_dir" ] || continue
        for lf_file in "$lf_dir"/*.ltx; do
            [ -e "$lf_file" ] || [ -L "$lf_file" ] || continue
            if is_ltx_name "${lf_file##*/}"; then
                printf '%s %s\n' "${lf_dir##*/}" "${lf_file##*/}"
            fi
        done
    done
}

# hex_gt A B: whether the 16-hex-digit TXID A is above B, as unsigned 64-bit numbers (shell arithmetic is signed:
# $((0x8000000000000000)) is negative), compared as two 32-bit halves.
hex_gt() {
    hg_a=$((0x${1%????????}))
    hg_b=$((0x${2%????????}))
    if [ "$hg_a" -ne "$hg_b" ]; then
        [ "$hg_a" -gt "$hg_b" ]
        return
    fi
    [ $((0x${1#????????})) -gt $((0x${2#????????})) ]
}

# ltx_header FILE: HDR_MIN and HDR_MAX (16 hex digits each) from FILE's LTX header; fails unless it starts with the
# magic "LTX1". Reads 32 bytes of a file the caller checked to be regular.
ltx_header() {
    lh_hex=$(od -An -v -tx1 -N32 "$1" 2>/dev/null | tr -d ' \n') || return 1
    case "$lh_hex" in 4c545831*) ;; *) return 1 ;; esac
    [ "${#lh_hex}" -eq 64 ] || return 1
    lh_tail=${lh_hex#????????????????????????????????}
    HDR_MIN=${lh_tail%????????????????}
    HDR_MAX=${lh_tail#????????????????}
}

# header_agrees FILE NAME: whether FILE's header names the TXID range of NAME (<min>-<max>.ltx).
header_agrees() {
    ltx_header "$1" || return 1
    [ "$HDR_MIN-$HDR_MAX.ltx" = "$2" ]
}

# mac_checked_body MANIFEST DIR: copies MANIFEST to DIR/manifest and its body to DIR/body; fails unless its last
# line is the MAC line and the MAC verifies under the loaded key. Never follows a link.
mac_checked_body() {
    [ -f "$1" ] && [ ! -L "$1" ] || return 1
    cp "$1" "$2/manifest" 2>/dev/null || return 1
    mb_last=$(tail -n 1 "$2/manifest")
    manifest_field hmac "$mb_last" && is_hex "$MANIFEST_VALUE" 64 || return 1
    [ -z "$(tail -c 1 "$2/manifest")" ] || return 1
    mb_lines=$(wc -l <"$2/manifest" | tr -d ' ')
    head -n $((mb_lines - 1)) "$2/manifest" >"$2/body" || return 1
    [ "$(hmac_file "$2/body")" = "$MANIFEST_VALUE" ]
}

positive_seconds() {
    case "$2" in
        '' | *[!0-9]* | 0*) die "$EX_USAGE" "$1 must be a positive whole number of seconds (got '$2')." ;;
    esac
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
    CLOCK_SKEW_SECONDS=${CLOCK_SKEW_SECONDS:-300}
    READ_TIMEOUT_SECONDS=${READ_TIMEOUT_SECONDS:-300}
    positive_seconds CLOCK_SKEW_SECONDS "$CLOCK_SKEW_SECONDS"
    positive_seconds READ_TIMEOUT_SECONDS "$READ_TIMEOUT_SECONDS"
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
    if [ "$v_age" -lt "-$CLOCK_SKEW_SECONDS" ]; then
        die "$EX_STALE" "The replica's manifest says it was signed $((-v_age)) s in the future (txid $v_txid), more \
than the ${CLOCK_SKEW_SECONDS} s of clock skew allowed: a manifest from the future never ages past \
backup.auth.maxAge, so it is refused. Check the clocks of the nodes that ran $APP (NTP), and the NFS export (who wrote \
it?); once the clocks are right the signer's next signature is accepted."
    fi
    if [ -n "$MIN_TXID" ] && hex_gt "$MIN_TXID" "$v_txid"; then
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
    # Only what the restore needs: the newest signed snapshot (level 9) and every signed file that ends after it
    # (Litestream's restore plan starts from the newest snapshot); older snapshots and what they supersede stay out.
    awk '$1 == 9 { t = substr($2, 18, 16); if (t "" > snap "") snap = t }
        { line[NR] = $0; lv[NR] = $1; top[NR] = substr($2, 18, 16) }
        END { for (i = 1; i <= NR; i++) if (snap == "" || (lv[i] == 9 && top[i] == snap) || (lv[i] != 9 && top[i] "" > snap "")) print line[i] }' \
        "$COPY_DIR/files" >"$COPY_DIR/needed"
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
        if [ ! -f "$v_src" ]; then
            die "$EX_NOT_REGULAR" "The signed replica file '$v_src' is not a regular file (a FIFO, device, socket or \
directory now stands at its name): it is never read. Something other than Litestream wrote it: inspect the NFS \
export, remove it and restore '$REPLICA_DIR' from a copy you trust."
        fi
        [ -d "$COPY_DIR/ltx/$v_level" ] || mkdir -p "$COPY_DIR/ltx/$v_level" || die "$EX_IO" "Could not create \
'$COPY_DIR/ltx/$v_level'."
        v_copied=0
        timeout "$READ_TIMEOUT_SECONDS" cp "$v_src" "$COPY_DIR/ltx/$v_level/$v_name" 2>/dev/null || v_copied=$?
        if [ "$v_copied" -eq 124 ] || [ "$v_copied" -eq 143 ]; then
            die "$EX_NOT_REGULAR" "Reading the signed replica file '$v_src' did not end within \
$READ_TIMEOUT_SECONDS s (a FIFO swapped in at its name, or a hung NFS mount). Inspect the NFS export, then restart \
the pod."
        fi
        [ "$v_copied" -eq 0 ] || die "$EX_IO" "Could not copy '$v_src' (NFS \
volume, permissions, or the local volume is full)."
    done <"$COPY_DIR/needed"
    # The copies' digests, in the background: the checks below read only the local copies' headers and the
    # manifest, so they overlap the hashing (on a second core) and the verdict waits for both.
    : >"$COPY_DIR/sums"
    v_hasher=
    if [ -d "$COPY_DIR/ltx" ]; then
        (cd "$COPY_DIR/ltx" && sha256sum -- [0-9]/*.ltx) >"$COPY_DIR/sums" &
        v_hasher=$!
    fi
    # Each copy's header must name the range its name says: Litestream takes a file's TXIDs from its name, so a
    # renamed file (a foreign or an old snapshot put at a newer name) would restore as if it were that position.
    while read -r h_level h_name _; do
        h_copy="$COPY_DIR/ltx/$h_level/$h_name"
        [ -f "$h_copy" ] || continue
        if ! header_agrees "$h_copy" "$h_name"; then
            die "$EX_TAMPERED" "The replica file '$REPLICA_DIR/ltx/$h_level/$h_name' is signed, but its LTX header \
does not name the TXID range of its name: it was renamed (a foreign file or an older snapshot put at a newer \
position), and a signer before this check signed it. Not restoring. Inspect the NFS export and restore \
'$REPLICA_DIR' from a copy you trust."
        fi
    done <"$COPY_DIR/needed"
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
            if [ "$c_level" -gt "$m_level" ] && ! hex_gt "$c_min" "$m_min" && ! hex_gt "$m_max" "$c_max"; then
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
    # The copies' digests against the signed ones (a different size is a different digest).
    if [ -n "$v_hasher" ] && ! wait "$v_hasher"; then
        die "$EX_IO" "Could not hash the copies in '$COPY_DIR'."
    fi
    v_bad=$(awk 'NR == FNR { sum[$2] = $1; next } ($1 "/" $2) in sum && sum[$1 "/" $2] != $4 { print $1 "/" $2; exit }' \
        "$COPY_DIR/sums" "$COPY_DIR/files")
    if [ -n "$v_bad" ]; then
        die "$EX_TAMPERED" "The replica file '$REPLICA_DIR/ltx/$v_bad' is not the file this tailnet's writer signed \
(its digest differs from the manifest's): it was swapped or modified, e.g. with a file of another tailnet's \
replica. Not restoring. Inspect the NFS export and restore '$REPLICA_DIR' from a copy you trust."
    fi
    # What the restore moves out of Litestream's way (every file not signed) and hands the signer (what was verified).
    awk '{ print $1, $2 }' "$COPY_DIR/files" >"$COPY_DIR/signed"
    awk '{ print $1, $2, $4 }' "$COPY_DIR/needed" >"$COPY_DIR/baseline"
    rm -f "$COPY_DIR/manifest" "$COPY_DIR/body" "$COPY_DIR/files" "$COPY_DIR/missing" "$COPY_DIR/sums" \
        "$COPY_DIR/needed"
    if [ "$v_unsigned" -gt 0 ]; then
        info "$v_unsigned LTX file(s) of the replica are not in the manifest (written after its last signature, or \
planted): not restored; the restore stops at the signed position txid $v_txid."
    fi
    printf 'txid=%s signed_at=%s files=%s unsigned=%s\n' "$v_txid" "$v_signed_at" "$v_files" "$v_unsigned"
}

# --- pre-upgrade snapshots -------------------------------------------------------------------------------------
# snapshot_mac FROM TO SHA256: the snapshot's MAC, as 64 hex digits on stdout.
snapshot_mac() {
    if [ "$#" -ne 3 ] || ! is_hex "$3" 64; then
        die "$EX_USAGE" "usage: $0 snapshot-mac FROM TO SHA256 (64 hex digits)."
    fi
    case "$1$2" in *[!0-9.]* | '') die "$EX_USAGE" "FROM and TO must be versions X.Y.Z (got '$1', '$2')." ;; esac
    app_input
    load_key
    sm_body=$(mktemp "${TMPDIR:-/tmp}/snapshot.XXXXXX") || die "$EX_IO" "Could not create a temp file."
    printf 'headscale-ha-pre-upgrade-snapshot 1\napp %s\nfrom %s\nto %s\nsha256 %s\n' "$APP" "$1" "$2" "$3" >"$sm_body"
    sm_mac=$(hmac_file "$sm_body") || sm_mac=
    rm -f "$sm_body"
    [ -n "$sm_mac" ] || die "$EX_IO" "Could not compute the MAC in ${TMPDIR:-/tmp}."
    printf '%s\n' "$sm_mac"
}

# check_snapshot DIR: exit 0 when DIR's snapshot is authentic, 41 (no MAC) or 43 (a MAC that does not verify).
check_snapshot() {
    [ "$#" -eq 1 ] || die "$EX_USAGE" "usage: $0 check-snapshot <backup dir>/pre-upgrade/<from>-<to>"
    cs_dir=${1%/}
    cs_name=${cs_dir##*/}
    cs_from=${cs_name%%-*}
    cs_to=${cs_name#*-}
    for cs_file in "$cs_dir/headscale.sqlite" "$cs_dir/headscale.sqlite.hmac"; do
        if [ -L "$cs_file" ] || [ ! -f "$cs_file" ]; then
            die "$EX_FORGED" "'$cs_file' is missing or not a regular file: '$cs_dir' is not a snapshot this tailnet's \
writer took with signed backups on. Do not seed from it."
        fi
    done
    cs_sum=$(sha256sum "$cs_dir/headscale.sqlite") || die "$EX_IO" "Could not read '$cs_dir/headscale.sqlite'."
    cs_sum=${cs_sum%% *}
    cs_mac=$(snapshot_mac "$cs_from" "$cs_to" "$cs_sum")
    IFS= read -r cs_recorded <"$cs_dir/headscale.sqlite.hmac" || cs_recorded=
    if [ "$cs_mac" != "$cs_recorded" ]; then
        die "$EX_TAMPERED" "The snapshot '$cs_dir/headscale.sqlite' (sha256 $cs_sum) is not the database this \
tailnet's writer snapshotted before the upgrade $cs_from -> $cs_to (its MAC does not verify under this key): \
swapped or edited on the export, or taken under another key. Do not seed from it."
    fi
    info "snapshot authenticated: $cs_from -> $cs_to sha256=$cs_sum"
}

# --- main -----------------------------------------------------------------------------------------------------
# Sourced by the signer (MANIFEST_LIBRARY=1): the functions above, no subcommand.
if [ "${MANIFEST_LIBRARY:-}" = 1 ]; then
    return 0
fi
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
    verify)
        replica_inputs
        verify
        ;;
    snapshot-mac)
        shift
        snapshot_mac "$@"
        ;;
    check-snapshot)
        shift
        check_snapshot "$@"
        ;;
    *) die "$EX_USAGE" "usage: $0 verify|hmac|snapshot-mac|check-snapshot (see the header of this script)." ;;
esac
