#!/bin/sh
# The signed manifest of a Litestream file replica: what binds the replica on the NFS backup export to this
# tailnet's writers, so a restore can tell a replica they wrote from one that anybody else who can write the export
# planted, swapped or rolled back.
#
# Runs in litestream/litestream (alpine: busybox ash + litestream only), so: POSIX sh and busybox tools. Beyond what
# the other scripts already use (sha256sum, cut, tr, sed, sort, mktemp, date, ls, cp, wc), it uses awk, od (an LTX
# header's 32 bytes), timeout (a bounded read), mv (strays to the quarantine) and a fractional `sleep` (busybox
# applets of the image; POSIX awk, no GNU extension), and never openssl.
#
#   sh litestream-manifest.sh run      the signer sidecar: signs what this writer wrote (the signing rule below)
#                                      whenever the replica's files change (checked every
#                                      SIGN_INTERVAL_SECONDS) and at least every HEARTBEAT_SECONDS; on SIGTERM it keeps
#                                      signing until the replica is still (Litestream ships its tail), then exits 0
#   sh litestream-manifest.sh sign     one signature of the replica as it is now, by the same rule
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
#   DB_PATH           run, sign: the application's database (absolute, on the local volume, mounted read-only):
#                     Litestream's local copies of its level-0 files are "<dir>/.<name>-litestream/ltx/0/"
#   BASELINE_FILE     run, sign, optional: "<level> <name> <sha256>" lines of the files the restore verified (the
#                     restore's record on the local volume), carried as this writer's own
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

# --- sign: only what this writer wrote ------------------------------------------------------------------------
# The signing rule. Litestream 0.5.17 writes its LTX files with HeaderFlagNoChecksum: their pre- and post-apply
# checksums are zero, so the LTX format offers no checksum chain between files. What it does offer is a header that
# names the file's TXID range (bytes 16-31: min and max TXID, big-endian), and Litestream's own way of shipping: every
# level-0 file is written to the database's local directory "<dir>/.<db>-litestream/ltx/0/<name>" first and then
# copied byte for byte to the replica. So a file is signed ("attested") only when
#   - it is a regular file whose header starts with "LTX1" and names the same TXID range as its file name, and
#   - level 0: the writer's local copy of that name exists and has the same SHA-256 (this writer wrote it: nobody who
#     can only write the export can write the pod's local volume), and it follows the last position signed (the
#     local directory also holds the file Litestream fetches from the export as its baseline after a restart), or
#   - levels 1-9 (compactions and snapshots, which Litestream writes straight to the replica): its whole range lies
#     at or below the attested head, the highest position reached by files this writer attested,
#   - and a file attested once keeps its digest: the same name with other content is refused, never re-signed.
# Attestation carries over a restart from the manifest (when its MAC verifies under this key for this APP) and from
# BASELINE_FILE (the files the restore verified, on the local volume). Anything else is left out of the manifest and
# reported once (a warning naming the file and why); a refused level-0 file above the signed position is moved to
# <backup dir>/quarantine/<UTC time>/ltx/0/ at once (Litestream takes its position from the highest level-0 name when
# it restarts), and the restore moves the rest out of Litestream's way.
#
# The digest cache of the signer: "<path> <inode> <size> <sha256> <header> <local sha256>" lines (header: ok or bad;
# local: the local copy's digest, or - ). Litestream writes each LTX file to "<name>.tmp" and renames it, so a file's
# inode and size identify its content; a rewritten file is a new inode.
CACHE=
SIGNED_TXID=
SIGNED_AT=
RECORDED_TXID=
SIGN_WORK=
ATTESTED_HEAD=0000000000000000
LOCAL_LTX_DIR=
# The pod's name (its UTS namespace's host name), or the process id.
SIGNER_ID=$$
if [ -r /proc/sys/kernel/hostname ] && IFS= read -r SIGNER_ID </proc/sys/kernel/hostname; then :; fi
case "$SIGNER_ID" in '' | *[!A-Za-z0-9.-]*) SIGNER_ID=$$ ;; esac

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

# carry_attestation: ATTESTED ("<level> <name> <sha256>" lines) and ATTESTED_HEAD from what this tailnet's writers
# signed before (the manifest, when it verifies for APP) and from BASELINE_FILE (what the restore verified).
carry_attestation() {
    : >"$SIGN_WORK/attested"
    if mac_checked_body "$MANIFEST_FILE" "$SIGN_WORK" && [ "$(sed -n 2p "$SIGN_WORK/body")" = "app $APP" ]; then
        awk '$1 == "f" && NF == 5 { print $2, $3, $5 }' "$SIGN_WORK/body" >>"$SIGN_WORK/attested"
        info "carrying the signed manifest's $(wc -l <"$SIGN_WORK/attested" | tr -d ' ') file(s) over."
    elif [ -e "$MANIFEST_FILE" ]; then
        info "warning: the manifest '$MANIFEST_FILE' does not verify under this key for $APP; nothing of it is carried."
    fi
    if [ -n "$BASELINE_FILE" ] && [ -f "$BASELINE_FILE" ] && [ ! -L "$BASELINE_FILE" ]; then
        awk 'NF == 3 && $1 ~ /^[0-9]$/ { print }' "$BASELINE_FILE" >>"$SIGN_WORK/attested"
    fi
    LC_ALL=C sort -u "$SIGN_WORK/attested" -o "$SIGN_WORK/attested"
    ca_head=$(awk '{ t = substr($2, 18, 16); if (t "" > max "") max = t } END { print max }' "$SIGN_WORK/attested")
    ATTESTED_HEAD=${ca_head:-0000000000000000}
    rm -f "$SIGN_WORK/manifest" "$SIGN_WORK/body"
}

# inspect_new TODO SUMS: for each new file ("<path> <inode> <size>" in TODO, digests in SUMS), the cache line with
# its header verdict and, for level 0, the digest of the writer's local copy.
inspect_new() {
    while read -r in_path in_inode in_size; do
        in_sum=$(awk -v p="$in_path" '$2 == p { print $1; exit }' "$2")
        [ -n "$in_sum" ] || continue
        in_name=${in_path##*/}
        in_level=${in_path%/*}
        in_level=${in_level##*/}
        in_header=bad
        if header_agrees "$in_path" "$in_name"; then
            in_header=ok
        fi
        in_local=-
        in_copy="$LOCAL_LTX_DIR/0/$in_name"
        if [ "$in_level" = 0 ] && [ "$in_header" = ok ] && [ -f "$in_copy" ] && [ ! -L "$in_copy" ]; then
            in_local=$(sha256sum "$in_copy" 2>/dev/null) || in_local=-
            in_local=${in_local%% *}
        fi
        printf '%s %s %s %s %s %s\n' "$in_path" "$in_inode" "$in_size" "$in_sum" "$in_header" "$in_local"
    done <"$1"
}

# decide KNOWN: the manifest's file lines (to "lines") and the refusals (to "refused"), by the signing rule above.
decide() {
    awk -v attested="$SIGN_WORK/attested" -v head="$ATTESTED_HEAD" -v root="$REPLICA_DIR/ltx/" \
        -v refused="$SIGN_WORK/refused" -v out="$SIGN_WORK/lines" -v movable="$SIGN_WORK/movable" '
        # succ(h): the 16-hex-digit TXID after h (lowercase, no wrap past ffffffffffffffff).
        function succ(h,    i, c, d) {
            for (i = 16; i >= 1; i--) {
                c = substr(h, i, 1); d = index("0123456789abcdef", c)
                if (d < 16) return substr(h, 1, i - 1) substr("0123456789abcdef", d + 1, 1) substr("0000000000000000", 1, 16 - i)
            }
            return h
        }
        BEGIN { while ((getline line < attested) > 0) { split(line, a, " "); sum[a[1] " " a[2]] = a[3] } }
        {
            rel = substr($1, length(root) + 1); split(rel, p, "/"); id = p[1] " " p[2]; max = substr(p[2], 18, 16)
            n++; path[n] = $1; ident[n] = id; size[n] = $3; digest[n] = $4; top[n] = max; level[n] = p[1]
            if (id in sum) {
                if (sum[id] == $4) ok[n] = 1; else why[n] = "its content differs from the content this writer signed"
            } else if ($5 != "ok") {
                why[n] = "its LTX header does not name the TXID range of its file name"
            } else if (p[1] == "0") {
                # In name order: a level-0 file of this writer follows the last position it signed (or repeats one).
                if ($6 != $4) why[n] = "it is not the level-0 file this writer wrote (no identical local copy)"
                else if (substr(p[2], 1, 16) "" > succ(head) "") {
                    why[n] = "it does not follow the last position this writer signed (" head "): a file Litestream " \
                        "fetched from the export as its baseline (planted) or a gap"
                } else { ok[n] = 1; if (max "" > head "") head = max }
            } else later[n] = 1
        }
        END {
            for (i = 1; i <= n; i++) if (i in later) {
                if (top[i] "" <= head "") ok[i] = 1
                else why[i] = "its range ends beyond every position this writer wrote"
            }
            for (i = 1; i <= n; i++) {
                if (i in ok) print "f " ident[i] " " size[i] " " digest[i] > out
                else print path[i] " " why[i] >> refused
                # A refused level-0 file above the head would become Litestream position at its next start.
                if (!(i in ok) && level[i] == "0" && top[i] "" > head "") print path[i] > movable
            }
            print head
        }' "$1"
}

# report_refused: a warning for each refused file, once per file (path and inode).
report_refused() {
    [ -s "$SIGN_WORK/refused" ] || return 0
    touch "$SIGN_WORK/reported"
    while read -r rr_path rr_why; do
        rr_inode=$(awk -v p="$rr_path" '$1 == p { print $2; exit }' "$CACHE_NOW")
        if ! grep -qx "$rr_path $rr_inode" "$SIGN_WORK/reported"; then
            info "warning: NOT SIGNING '$rr_path': $rr_why. Something other than this pod's Litestream wrote it \
(anyone who can write the NFS export can); it is left out of the manifest and the next restore moves it aside."
            printf '%s %s\n' "$rr_path" "$rr_inode" >>"$SIGN_WORK/reported"
        fi
    done <"$SIGN_WORK/refused"
}

# move_stray: stray level-0 files above the head (SIGN_WORK/movable) into <backup dir>/quarantine/<UTC time>/ltx/0/,
# never deleted: Litestream takes the replica's position from the highest level-0 name when it (re)starts.
move_stray() {
    [ -s "$SIGN_WORK/movable" ] || return 0
    ms_dir="${REPLICA_DIR%/*}/quarantine/$(date -u +%Y%m%dT%H%M%SZ)/ltx/0"
    while IFS= read -r ms_path; do
        if mkdir -p "$ms_dir" && mv -f "$ms_path" "$ms_dir/"; then
            info "warning: moved the stray level-0 file '$ms_path' aside to '$ms_dir' (above the signed position: \
Litestream would take it as the replica's position)."
        else
            info "warning: could not move the stray level-0 file '$ms_path' aside; the next restore moves it."
        fi
    done <"$SIGN_WORK/movable"
}

# sign_now: write the manifest of the files this writer wrote (nothing when there is none yet). A handful of
# processes per signature whatever the replica's size (ls, awk, the HMAC), plus a few per new file (sha256sum, od).
sign_now() {
    set -- "$REPLICA_DIR"/ltx/[0-9]/*.ltx
    [ -e "$1" ] || [ -L "$1" ] || return 0
    sn_work=$SIGN_WORK
    rm -f "$sn_work/todo" "$sn_work/known" "$sn_work/sums" "$sn_work/lines" "$sn_work/refused" "$sn_work/strange"
    # A file compacted away between the glob and ls is reported by ls and left out.
    # shellcheck disable=SC2012 # inode, type and size of Litestream's own files (hex names, no blanks)
    ls -lnid -- "$@" >"$sn_work/ls" 2>/dev/null || true
    [ -f "$CACHE" ] || : >"$CACHE"
    # ls -lnid: inode mode links uid gid size <date> path; LTX names only (<16 hex>-<16 hex>.ltx, level 0-9), and
    # regular files only: a FIFO, device, socket or link at an LTX name is refused unread.
    if ! awk -v cache="$CACHE" -v todo="$sn_work/todo" -v known="$sn_work/known" -v root="$REPLICA_DIR/ltx/" \
        -v refused="$sn_work/refused" -v strange="$sn_work/strange" '
        BEGIN {
            h = "[0-9a-f]"; t = h h h h h h h h h h h h h h h h
            name = "^[0-9]/" t "-" t "[.]ltx$"
            while ((getline line < cache) > 0) { split(line, f, " "); seen[f[1] " " f[2] " " f[3]] = line }
        }
        {
            path = $NF
            if (substr(path, 1, length(root)) != root || substr(path, length(root) + 1) !~ name) next
            if (substr($2, 1, 1) != "-") {
                print path " it is not a regular file (" substr($2, 1, 1) ")" > refused
                if (substr(path, length(root) + 1, 2) == "0/") print path > strange
                next
            }
            key = path " " $1 " " $6
            if (key in seen) print seen[key] > known; else print key > todo
        }' "$sn_work/ls"; then
        return 1
    fi
    if [ -s "$sn_work/todo" ]; then
        # shellcheck disable=SC2046 # paths of LTX names (hex, no blanks), split on purpose
        sha256sum $(cut -d ' ' -f 1 "$sn_work/todo") >"$sn_work/sums" 2>/dev/null || true
        inspect_new "$sn_work/todo" "$sn_work/sums" >>"$sn_work/known" || return 1
    fi
    [ -f "$sn_work/known" ] || : >"$sn_work/known"
    # Byte order: level 0 first, then by TXID (the names are fixed-width hex), whatever the locale.
    LC_ALL=C sort -o "$sn_work/known" "$sn_work/known"
    rm -f "$sn_work/movable"
    sn_head=$(decide "$sn_work/known") || return 1
    CACHE_NOW="$sn_work/known"
    report_refused
    # What is not a regular file at a level-0 name above the head goes too (Litestream would open it at a restart).
    if [ -s "$sn_work/strange" ]; then
        while IFS= read -r sn_path; do
            sn_top=${sn_path##*-}
            sn_top=${sn_top%.ltx}
            ! hex_gt "$sn_top" "$sn_head" || printf '%s\n' "$sn_path" >>"$sn_work/movable"
        done <"$sn_work/strange"
    fi
    move_stray
    mv -f "$sn_work/known" "$CACHE"
    [ -s "$sn_work/lines" ] || return 0
    sort "$sn_work/lines" -o "$sn_work/lines"
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
        awk '{ print $2, $3, $5 }' "$sn_work/lines" >"$sn_work/attested"
        ATTESTED_HEAD=$sn_head
        SIGNED_TXID=$sn_max
        SIGNED_AT=$sn_at
        return 0
    fi
    rm -f "$sn_body"
    return 1
}

# start_signing: the work directory, the cache and what earlier signatures attested.
start_signing() {
    DB_PATH=${DB_PATH:-}
    BASELINE_FILE=${BASELINE_FILE:-}
    require_absolute DB_PATH "$DB_PATH"
    [ -z "$BASELINE_FILE" ] || require_absolute BASELINE_FILE "$BASELINE_FILE"
    LOCAL_LTX_DIR="${DB_PATH%/*}/.${DB_PATH##*/}-litestream/ltx"
    SIGN_WORK=$(mktemp -d "${TMPDIR:-/tmp}/sign.XXXXXX") || die "$EX_IO" "Could not create a work directory in \
${TMPDIR:-/tmp}. Check the container's /tmp volume."
    CACHE="$SIGN_WORK/cache"
    carry_attestation
}

# record_position: the highest position signed since this signer started, into POSITION_FILE (when set). A failure
# is reported and retried at the next signature: it never stops the signing.
record_position() {
    [ -n "$POSITION_FILE" ] && [ -n "$SIGNED_TXID" ] || return 0
    if [ -n "$RECORDED_TXID" ] && ! hex_gt "$SIGNED_TXID" "$RECORDED_TXID"; then
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
    start_signing
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
        start_signing
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
