#!/bin/sh
# The backup signer: signs the manifest of a Litestream file replica (the format and the MAC are those of
# litestream-manifest.sh, which it sources) with only what this pod's Litestream wrote, so that whoever can write the
# NFS export can neither get a file of theirs signed nor have a restore hand one to Litestream.
#
# Runs in litestream/litestream (a POSIX sh, busybox-compatible tools and litestream), so: POSIX sh. Beyond what the
# manifest script uses, it uses mv (strays to the quarantine), ln and cmp (the proofs), a fractional `sleep`, and
# litestream restore (the proofs).
#
#   sh litestream-sign.sh run     the signer sidecar: signs what this writer wrote (the signing rule below) whenever
#                                 the replica's files change (checked every SIGN_INTERVAL_SECONDS) and at least every
#                                 HEARTBEAT_SECONDS; on SIGTERM it keeps signing until the replica is still
#                                 (Litestream ships its tail), then exits 0
#   sh litestream-sign.sh sign    one signature of the replica as it is now, by the same rule
#
# Environment (besides KEY_FILE, APP, REPLICA_DIR and MANIFEST_FILE, as litestream-manifest.sh describes them):
#   MANIFEST_SCRIPT   litestream-manifest.sh (absolute): sourced for the key, the MAC and the LTX header checks
#   DB_PATH           the application's database (absolute, on the local volume, mounted read-only): Litestream's
#                     local copies of its level-0 files are "<dir>/.<name>-litestream/ltx/0/"
#   BASELINE_FILE     optional: "<level> <name> <sha256>" lines of the files the restore verified (the restore's
#                     record on the local volume), carried as this writer's own
#   SCRATCH_DIR       the signer's own scratch directory (absolute; an emptyDir only this container writes): the
#                     mirror of the signed files and the proofs' restores, about four times the database
#   LITESTREAM_BIN    optional: the litestream executable of the proofs (default: litestream)
#   READ_TIMEOUT_SECONDS  optional: the longest read of one file, and the longest restore of a proof (default 300)
#   POSITION_FILE     run, optional: after each signature, the highest position signed since this signer started is
#                     written there as "<16 hex txid> <signed_at>" (temp file, then rename): what the position
#                     recorder sidecar copies into the served witness, outside the export. Never lowered while the
#                     signer runs, so a replica rolled back under a running pod is never recorded as its position.
#   SIGN_INTERVAL_SECONDS  run: how often the replica's file names are compared (default 0.2; a fraction is fine)
#   HEARTBEAT_SECONDS  run: the longest time between two signatures, even with no change (default 60)
#   TERM_SETTLE_SECONDS  run: on SIGTERM, sign until the replica has not changed for this long (default 2), at most
#                     TERM_MAX_SECONDS (default 10)
#
# Exit codes: 0 ok; 2 bad invocation (a variable missing or malformed, no such subcommand); 45 the key; 46 the
# replica, the manifest or the scratch directory cannot be written.
#
# Never run with `set -x`: the key passes through shell variables.

set -eu

MANIFEST_SCRIPT=${MANIFEST_SCRIPT:-}
case "$MANIFEST_SCRIPT" in
    /*) ;;
    *)
        printf 'litestream-sign: REFUSED (exit 2): MANIFEST_SCRIPT must be the absolute path of litestream-manifest.sh \
(got '\''%s'\'').\n' "$MANIFEST_SCRIPT" >&2
        exit 2
        ;;
esac
# shellcheck disable=SC2034 # read by the sourced script: its functions, no subcommand
MANIFEST_LIBRARY=1
# shellcheck disable=SC1090,SC1091 # litestream-manifest.sh, checked on its own
. "$MANIFEST_SCRIPT"
# shellcheck disable=SC2034 # the name info and die print
PROG=litestream-sign

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
#   - levels 1-9 (compactions and snapshots, which Litestream writes straight to the replica, from the replica's
#     own files or the database): its whole range lies at or below the attested head (the highest position reached
#     by files this writer attested), it ends after the newest signed snapshot (nothing a restore does not need is
#     signed), and it is *proven*: restoring through it to its last TXID gives, byte for byte, the database that
#     this writer's own signed files give at that TXID (the proof, below),
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
# How sign_now proves compactions and snapshots: now (the sign subcommand), background (the running signer), off.
PROOFS=now
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

# decide KNOWN: the manifest's file lines (to "lines"), the refusals (to "refused") and the files of levels 1-9 still
# to prove ("<path> <level> <name> <sha256>" to "unproven"), by the signing rule above.
decide() {
    rm -f "$SIGN_WORK/lines" "$SIGN_WORK/refused" "$SIGN_WORK/movable" "$SIGN_WORK/unproven"
    : >>"$SIGN_WORK/proven"
    : >>"$SIGN_WORK/failed"
    awk -v attested="$SIGN_WORK/attested" -v head="$ATTESTED_HEAD" -v root="$REPLICA_DIR/ltx/" \
        -v refused="$SIGN_WORK/refused" -v out="$SIGN_WORK/lines" -v movable="$SIGN_WORK/movable" \
        -v proven="$SIGN_WORK/proven" -v failed="$SIGN_WORK/failed" -v unproven="$SIGN_WORK/unproven" '
        # succ(h): the 16-hex-digit TXID after h (lowercase, no wrap past ffffffffffffffff).
        function succ(h,    i, c, d) {
            for (i = 16; i >= 1; i--) {
                c = substr(h, i, 1); d = index("0123456789abcdef", c)
                if (d < 16) return substr(h, 1, i - 1) substr("0123456789abcdef", d + 1, 1) substr("0000000000000000", 1, 16 - i)
            }
            return h
        }
        BEGIN {
            while ((getline line < attested) > 0) { split(line, a, " "); sum[a[1] " " a[2]] = a[3] }
            while ((getline line < proven) > 0) good[line] = 1
            # "<level> <name> <sha256> <why>"
            while ((getline line < failed) > 0) { split(line, a, " "); k = a[1] " " a[2] " " a[3]; bad[k] = substr(line, length(k) + 2) }
        }
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
                k = ident[i] " " digest[i]
                if (top[i] "" > head "") why[i] = "its range ends beyond every position this writer wrote"
                else if (k in good) ok[i] = 1
                else if (k in bad) why[i] = bad[k]
                else { pending[i] = 1; print path[i] " " k > unproven }
            }
            for (i = 1; i <= n; i++) {
                if (i in ok) print "f " ident[i] " " size[i] " " digest[i] > out
                else if (!(i in pending)) print path[i] " " why[i] >> refused
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
        case "$rr_why" in superseded:*) continue ;; esac
        rr_inode=$(awk -v p="$rr_path" '$1 == p { print $2; exit }' "$CACHE_NOW")
        if ! grep -qx "$rr_path $rr_inode" "$SIGN_WORK/reported"; then
            info "warning: NOT SIGNING '$rr_path': $rr_why. It is left out of the manifest (a restore never hands it \
to Litestream) and the next restore moves it aside when it lies above the signed position. Unless this pod's signer \
was stopped for a while, something other than this pod's Litestream wrote it: anyone who can write the NFS export."
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
    rm -f "$sn_work/todo" "$sn_work/known" "$sn_work/sums" "$sn_work/strange" "$sn_work/irregular"
    # A file compacted away between the glob and ls is reported by ls and left out.
    # shellcheck disable=SC2012 # inode, type and size of Litestream's own files (hex names, no blanks)
    ls -lnid -- "$@" >"$sn_work/ls" 2>/dev/null || true
    [ -f "$CACHE" ] || : >"$CACHE"
    # ls -lnid: inode mode links uid gid size <date> path; LTX names only (<16 hex>-<16 hex>.ltx, level 0-9), and
    # regular files only: a FIFO, device, socket or link at an LTX name is refused unread.
    if ! awk -v cache="$CACHE" -v todo="$sn_work/todo" -v known="$sn_work/known" -v root="$REPLICA_DIR/ltx/" \
        -v refused="$sn_work/irregular" -v strange="$sn_work/strange" '
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
    sn_head=$(decide "$sn_work/known") || return 1
    if [ -s "$sn_work/unproven" ]; then
        case "$PROOFS" in
            now)
                prove_batch "$sn_work/lines" "$sn_work/unproven"
                sn_head=$(decide "$sn_work/known") || return 1
                ;;
            background) start_proofs ;;
        esac
    fi
    [ ! -f "$sn_work/irregular" ] || cat "$sn_work/irregular" >>"$sn_work/refused"
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
    # Made whole in the pod's own work directory, then written under umask 022 (0644: the manifest is not secret)
    # beside the manifest in one write and renamed over it: an export replaced under this pass (a rollback) makes the
    # rename fail, never a manifest with its head missing. The temp name is this container's own (two pods of a
    # partition never share a temp file).
    sn_made="$sn_work/signed-manifest"
    sn_body="$MANIFEST_FILE.tmp.$SIGNER_ID.$$"
    sn_at=$(date -u +%s)
    if printf '%s\napp %s\nsigned_at %s\ntxid %s\nfiles %s\n' "$MAGIC" "$APP" "$sn_at" "$sn_max" "$2" >"$sn_made" &&
        cat "$sn_work/lines" >>"$sn_made" && sn_mac=$(hmac_file "$sn_made") &&
        printf 'hmac %s\n' "$sn_mac" >>"$sn_made" && (umask 022 && cat "$sn_made" >"$sn_body") &&
        mv -f "$sn_body" "$MANIFEST_FILE"; then
        awk '{ print $2, $3, $5 }' "$sn_work/lines" >"$sn_work/attested"
        ATTESTED_HEAD=$sn_head
        SIGNED_TXID=$sn_max
        SIGNED_AT=$sn_at
        return 0
    fi
    rm -f "$sn_body"
    return 1
}

# --- the proof of a compaction or snapshot ---------------------------------------------------------------------
# Litestream writes levels 1-9 straight to the export (a compaction from the replica's own lower-level files, a
# snapshot from the database), so no local copy vouches for them: anyone who can write the export can craft one with
# the right name and header, or have Litestream compact a planted file. What vouches for one is what it does: the
# signer restores through it, and compares the result with what its own signed files give.
#
# The mirror, SCRATCH_DIR/mirror/ltx/<level>/<name>: a copy of each signed file a restore to the head needs (the
# newest signed snapshot and every signed file ending after it that no higher level covers, level-0 files included
# after Litestream deletes them from the export), each the very bytes whose digest was signed: level-0 files from the writer's local copy, the rest
# from the copy a proof checked (or, after a restart, a copy of the export's file whose digest matched). Only this
# container writes it (an emptyDir of the pod), so it is the proofs' reference.
#
# The proof of a file F of level L (1-9) with range [min, max]:
#   reference  litestream restore -txid max from the mirror: the database at max, by this writer's own files;
#   through    litestream restore -txid max from F and the base it applies to: for a snapshot, F alone; otherwise the
#              newest signed snapshot and the mirror's files that end before min, so the plan reaches exactly min - 1
#              (or the snapshot, when F overlaps it) and must go through F to reach max;
#   F is proven when both databases are byte-identical (cmp). A file the newest signed snapshot already covers is not
#   signed: no restore needs it. Two restores of the database per new compaction (about 0.25 s each for 24 MB); the
#   reference of the last proven max is kept for the next file that ends there.

# mirror_snapshot: MS_NAME, the name of the mirror's newest snapshot (empty when it has none), and MS_MAX its max.
mirror_snapshot() {
    MS_NAME=
    MS_MAX=
    for ms_file in "$MIRROR_DIR"/ltx/9/*.ltx; do
        [ -f "$ms_file" ] || continue
        MS_NAME=${ms_file##*/}
        MS_MAX=${MS_NAME#*-}
        MS_MAX=${MS_MAX%.ltx}
    done
}

# mirror_add LEVEL NAME SHA256 SOURCE: a checked copy of SOURCE into the mirror (temp name, then rename); fails when
# it cannot be read within READ_TIMEOUT_SECONDS or its digest is not SHA256.
mirror_add() {
    ma_dir="$MIRROR_DIR/ltx/$1"
    [ -d "$ma_dir" ] || mkdir -p "$ma_dir" || return 1
    if timeout "$READ_TIMEOUT_SECONDS" cat "$4" >"$ma_dir/.$2.tmp" 2>/dev/null; then
        ma_sum=$(sha256sum "$ma_dir/.$2.tmp") || ma_sum=
        if [ "${ma_sum%% *}" = "$3" ]; then
            mv -f "$ma_dir/.$2.tmp" "$ma_dir/$2"
            return
        fi
    fi
    rm -f "$ma_dir/.$2.tmp"
    return 1
}

# update_mirror LINES: the mirror holds what a restore to the head can need of the signed files ("f <level> <name>
# <size> <sha256>" lines) and of what it held before (level-0 files Litestream has deleted from the export since):
# the newest snapshot, and each other file that neither that snapshot nor a file of a higher level (1-8) covers. So it
# holds about one snapshot and the compactions after it, not every level-0 file since the snapshot. One process
# decides what to copy and what to drop.
update_mirror() {
    for um_file in "$MIRROR_DIR"/ltx/[0-9]/*.ltx; do
        [ -f "$um_file" ] || continue
        um_level=${um_file%/*}
        printf 'm %s %s\n' "${um_level##*/}" "${um_file##*/}"
    done >"$SIGN_WORK/mirrored"
    awk -v dir="$MIRROR_DIR/ltx" '
        function add(level, name, sum) {
            id = level " " name
            if (!(id in at)) { n++; at[id] = n; l[n] = level; f[n] = name; lo[n] = substr(name, 1, 16); hi[n] = substr(name, 18, 16) }
            if (sum != "") s[at[id]] = sum
            if (level == "9" && hi[at[id]] "" > snap "") { snap = hi[at[id]]; keep = at[id] }
        }
        $1 == "m" { add($2, $3, ""); held[$2 " " $3] = 1; next }
        { add($2, $3, $5) }
        END {
            for (i = 1; i <= n; i++) {
                covered = (snap != "" && i != keep && hi[i] "" <= snap "")
                for (j = 1; !covered && j <= n; j++)
                    covered = (l[j] != "9" && l[j] + 0 > l[i] + 0 && lo[j] "" <= lo[i] "" && hi[i] "" <= hi[j] "")
                id = l[i] " " f[i]
                if (covered && (id in held)) print "drop " dir "/" l[i] "/" f[i]
                else if (!covered && !(id in held)) print "copy " id " " s[i]
            }
        }' "$SIGN_WORK/mirrored" "$1" >"$SIGN_WORK/mirror-work"
    while read -r um_what um_level um_name um_sum; do
        if [ "$um_what" = drop ]; then
            rm -f "$um_level"
            continue
        fi
        if [ "$um_level" = 0 ] && [ -f "$LOCAL_LTX_DIR/0/$um_name" ] && [ ! -L "$LOCAL_LTX_DIR/0/$um_name" ]; then
            # The writer's local copy, whose digest the signing rule just compared with the signed one (Litestream
            # writes it under a temp name and renames it: a name's content never changes).
            { [ -d "$MIRROR_DIR/ltx/0" ] || mkdir -p "$MIRROR_DIR/ltx/0"; } &&
                cp "$LOCAL_LTX_DIR/0/$um_name" "$MIRROR_DIR/ltx/0/.$um_name.tmp" &&
                mv -f "$MIRROR_DIR/ltx/0/.$um_name.tmp" "$MIRROR_DIR/ltx/0/$um_name" && continue
        elif mirror_add "$um_level" "$um_name" "$um_sum" "$REPLICA_DIR/ltx/$um_level/$um_name"; then
            continue
        fi
        info "warning: could not copy the signed file '$um_level/$um_name' into the signer's mirror (gone, or changed)."
    done <"$SIGN_WORK/mirror-work"
}

# restore_at DIR TXID OUT: Litestream's restore of the file replica DIR to TXID into OUT (replaced), its log beside.
restore_at() {
    rm -f "$3" "$3-wal" "$3-shm" "$3.tmp"
    timeout "$READ_TIMEOUT_SECONDS" "$LITESTREAM_BIN" restore -o "$3" -txid "$2" "file://$1" >"$3.log" 2>&1
}

# prove PATH LEVEL NAME SHA256: 0 proven (its checked copy joins the mirror); 1 refused (PROOF_WHY says why, for
# good: the same file is never proven again); 2 not now (it changed while read, or the scratch volume failed).
prove() {
    pv_min=${3%%-*}
    pv_max=${3#*-}
    pv_max=${pv_max%.ltx}
    mirror_snapshot
    if [ -n "$MS_NAME" ] && ! hex_gt "$pv_max" "$MS_MAX"; then
        PROOF_WHY="superseded: the signed snapshot $MS_NAME already covers its range (no restore needs it)"
        return 1
    fi
    pv_dir="$SCRATCH_DIR/proof"
    rm -rf "$pv_dir"
    mkdir -p "$pv_dir/through/ltx/$2" || return 2
    pv_copy="$pv_dir/through/ltx/$2/$3"
    timeout "$READ_TIMEOUT_SECONDS" cat "$1" >"$pv_copy" 2>/dev/null || return 2
    pv_sum=$(sha256sum "$pv_copy") || return 2
    [ "${pv_sum%% *}" = "$4" ] || return 2
    if [ "$2" != 9 ]; then
        if [ -n "$MS_NAME" ]; then
            mkdir -p "$pv_dir/through/ltx/9" && ln "$MIRROR_DIR/ltx/9/$MS_NAME" "$pv_dir/through/ltx/9/" || return 2
        fi
        for pv_file in "$MIRROR_DIR"/ltx/[0-8]/*.ltx; do
            [ -f "$pv_file" ] || continue
            pv_top=${pv_file##*-}
            pv_top=${pv_top%.ltx}
            hex_gt "$pv_min" "$pv_top" || continue
            pv_level=${pv_file%/*}
            pv_level=${pv_level##*/}
            mkdir -p "$pv_dir/through/ltx/$pv_level" && ln "$pv_file" "$pv_dir/through/ltx/$pv_level/" || return 2
        done
    fi
    if [ ! -f "$SCRATCH_DIR/reference-$pv_max.db" ]; then
        rm -f "$SCRATCH_DIR"/reference-*.db
        if ! restore_at "$MIRROR_DIR" "$pv_max" "$pv_dir/reference.db"; then
            PROOF_WHY="the files this writer signed do not reach its last TXID $pv_max, so nothing can vouch for it \
(Litestream: $(tail -n 1 "$pv_dir/reference.db.log"))"
            return 1
        fi
        mv -f "$pv_dir/reference.db" "$SCRATCH_DIR/reference-$pv_max.db" || return 2
    fi
    if ! restore_at "$pv_dir/through" "$pv_max" "$pv_dir/through.db"; then
        PROOF_WHY="Litestream cannot restore through it to $pv_max (Litestream: $(tail -n 1 "$pv_dir/through.db.log"))"
        return 1
    fi
    if ! cmp -s "$SCRATCH_DIR/reference-$pv_max.db" "$pv_dir/through.db"; then
        PROOF_WHY="restoring through it gives another database than this writer's own files give at $pv_max: crafted, \
or built by Litestream from a planted file"
        return 1
    fi
    mkdir -p "$MIRROR_DIR/ltx/$2" && mv -f "$pv_copy" "$MIRROR_DIR/ltx/$2/$3" || return 2
    rm -rf "$pv_dir"
}

# prove_batch LINES TODO: the mirror brought up to date with the signed files of LINES (only here, so no process is
# spent on other signatures: Litestream keeps its local level-0 copies for minutes after the compaction that covers
# them), then a proof of each file in TODO ("<path> <level> <name> <sha256>"), snapshots first (a compaction one
# covers is not needed), then in TXID order; the outcome is remembered by name and digest ("proven", "failed"), so a
# file is proven once.
prove_batch() {
    update_mirror "$1"
    LC_ALL=C sort -k 2,2r -k 3,3 "$2" -o "$2"
    while read -r pu_path pu_level pu_name pu_sum; do
        PROOF_WHY=
        pu_status=0
        prove "$pu_path" "$pu_level" "$pu_name" "$pu_sum" || pu_status=$?
        case "$pu_status" in
            0) printf '%s %s %s\n' "$pu_level" "$pu_name" "$pu_sum" >>"$SIGN_WORK/proven" ;;
            1) printf '%s %s %s %s\n' "$pu_level" "$pu_name" "$pu_sum" "$PROOF_WHY" >>"$SIGN_WORK/failed" ;;
            *) info "warning: could not prove '$pu_path' now (it changed while read, or the scratch volume \
'$SCRATCH_DIR' failed); trying again at the next signature." ;;
        esac
    done <"$2"
    rm -rf "$SCRATCH_DIR/proof"
}

# start_proofs: the running signer proves in a background job (two restores of the database take seconds), so the
# level-0 files Litestream ships meanwhile are signed at once; the next signature after the job ends takes its
# verdicts. One job at a time; it works on copies of the lists, and only it touches the mirror.
PROOF_PID=
start_proofs() {
    [ -z "$PROOF_PID" ] || return 0
    cp "$SIGN_WORK/lines" "$SIGN_WORK/proof-lines" && cp "$SIGN_WORK/unproven" "$SIGN_WORK/proof-todo" || return 0
    # Its own failures are handled where they happen (a failed proof is a verdict), never by set -e.
    (
        set +e
        prove_batch "$SIGN_WORK/proof-lines" "$SIGN_WORK/proof-todo"
    ) &
    PROOF_PID=$!
}

# proofs_done: whether a background proof job has just ended (its verdicts then need a signature).
proofs_done() {
    [ -n "$PROOF_PID" ] && ! kill -0 "$PROOF_PID" 2>/dev/null || return 1
    wait "$PROOF_PID" 2>/dev/null || true
    PROOF_PID=
}

# start_signing: the work directory, the cache and what earlier signatures attested.
start_signing() {
    DB_PATH=${DB_PATH:-}
    BASELINE_FILE=${BASELINE_FILE:-}
    require_absolute DB_PATH "$DB_PATH"
    [ -z "$BASELINE_FILE" ] || require_absolute BASELINE_FILE "$BASELINE_FILE"
    LOCAL_LTX_DIR="${DB_PATH%/*}/.${DB_PATH##*/}-litestream/ltx"
    SCRATCH_DIR=${SCRATCH_DIR:-}
    require_absolute SCRATCH_DIR "$SCRATCH_DIR"
    SCRATCH_DIR=${SCRATCH_DIR%/}
    MIRROR_DIR="$SCRATCH_DIR/mirror"
    LITESTREAM_BIN=${LITESTREAM_BIN:-litestream}
    READ_TIMEOUT_SECONDS=${READ_TIMEOUT_SECONDS:-300}
    positive_seconds READ_TIMEOUT_SECONDS "$READ_TIMEOUT_SECONDS"
    command -v "$LITESTREAM_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "The litestream executable '$LITESTREAM_BIN' \
was not found (the proofs restore with it). Run this script in the litestream image or set LITESTREAM_BIN."
    # The mirror outlives a restart of this container (same pod, same emptyDir): only this container writes it.
    mkdir -p "$MIRROR_DIR" || die "$EX_IO" "Could not create the mirror '$MIRROR_DIR'. Check the scratch volume."
    rm -rf "$SCRATCH_DIR/proof"
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
    PROOFS=background
    while [ "$STOPPING" = false ]; do
        listing_state
        rs_now_state=$LISTING_STATE
        rs_since=$((rs_since + 1))
        if proofs_done || [ "$rs_now_state" != "$rs_state" ] || [ "$rs_since" -ge "$rs_polls" ]; then
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
    # Stopping: Litestream ships its tail on its own SIGTERM; keep signing until the replica is still. No proof now
    # (a compaction left unproven is not signed: the files it covers still are).
    PROOFS=off
    if [ -n "$PROOF_PID" ]; then
        kill "$PROOF_PID" 2>/dev/null || true
        wait "$PROOF_PID" 2>/dev/null || true
        PROOF_PID=
    fi
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


# --- main -----------------------------------------------------------------------------------------------------
case "${1:-}" in
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
    *) die "$EX_USAGE" "usage: $0 run|sign (see the header of this script)." ;;
esac
