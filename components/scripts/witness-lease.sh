#!/bin/sh
# The witness lease: who may serve the tailnet's one registry is who holds a coordination.k8s.io/v1 Lease on a third
# API server (the witness), outside both sites' clusters. Two commands, for the two halves of a serving pod's life:
#
#   sh witness-lease.sh acquire   the gate, before restore-before-serve: polls the Lease until this IDENTITY holds it,
#                                 then writes the fencing counter (the Lease's leaseTransitions after the take) and
#                                 what `hold` needs into STATE_DIR, fills SERVE_DIR, and exits 0. It takes the Lease
#                                 when its holder released it (an empty holderIdentity, or '!SITE' for another site
#                                 that gave it up), when this IDENTITY is its holder (a restart of this pod), or when
#                                 the Lease has not changed (or has been missing: then it creates it) for
#                                 LEASE_SECONDS + SKEW_SECONDS of this process's own monotonic clock (so a Lease this
#                                 site gave up goes to another site first). Every write is conditional on the
#                                 resourceVersion read before it: of two takers, one wins (409).
#   sh witness-lease.sh hold      the renewer, beside the serving containers: renews every RENEW_SECONDS, each renewal
#                                 conditional on the resourceVersion of the last; it fences when the Lease is another's
#                                 (a renewal refused with 409 and the holder changed) or when FENCE_AFTER_SECONDS have
#                                 passed since the start of the last renewal the witness accepted: writes
#                                 STATE_DIR/fenced (why), empties SERVE_DIR, stops the writers (STOP), deletes its
#                                 own pod (POD_NAME) and exits 5. On SIGTERM or SIGINT it releases the Lease (empty
#                                 holderIdentity, conditional as ever) and exits 0: the pod is stopping, its writers
#                                 stopped first. With READY_URL, it gives the Lease up when the pod's writer has not
#                                 answered it (200) within READY_WITHIN_SECONDS of the take (a restore that keeps
#                                 failing, a Headscale that cannot start): it stops the writers, writes '!SITE' as the
#                                 holder (another site's gate takes it at once; this site's waits a lease), deletes its
#                                 own pod and exits 5.
#
# Two more, for a pod that serves only where its site holds the Lease but never holds it (Headplane):
#
#   sh witness-lease.sh follow    the follower's gate: reads the Lease (never writes it) until this site (IDENTITY's
#                                 part before the '/') has held it, in one holding (the same leaseTransitions), for
#                                 LEASE_SECONDS + SKEW_SECONDS since this gate first saw it, with a renewal seen since
#                                 (below); then writes that fencing counter and its proof into STATE_DIR, fills
#                                 SERVE_DIR and exits 0.
#   sh witness-lease.sh watch     the follower's watcher, beside its writers: reads the Lease every RENEW_SECONDS and
#                                 fences as `hold` does (STATE_DIR/fenced, SERVE_DIR emptied, STOP, its pod deleted,
#                                 exit 5) when another site holds it (any holder but SITE/... or none), when it is
#                                 gone, or FENCE_AFTER_SECONDS after the start of the last read that returned the
#                                 version before the newest it saw held by this site or by nobody. On SIGTERM or
#                                 SIGINT it empties SERVE_DIR, stops the writers and exits 0.
# The follower's rule: a read that returned version V before a read that returned a newer one started before that
# newer version was written, and every taker counts its LEASE_SECONDS + SKEW_SECONDS from after that write; so a
# watcher that stops FENCE_AFTER_SECONDS after that read's start stops as early as a holder that renewed then. A new
# follower waits LEASE_SECONDS + SKEW_SECONDS after it first saw its site take the Lease, longer than any other
# site's watcher may serve after that take (FENCE_AFTER_SECONDS plus its stops), so two sites' followers never write
# at once.
#
# The rule (why a fenced holder is stopped before anyone may take over): a taker counts LEASE_SECONDS + SKEW_SECONDS
# from the moment it first saw the Lease's current resourceVersion, which is after the holder sent the renewal that
# made it; the holder fences FENCE_AFTER_SECONDS after it sent that renewal. No wall clock is read for a decision
# (only /proc/uptime, which never jumps), so a skew between the sites' clocks does not matter; SKEW_SECONDS bounds how
# far two sites' elapsed-time measurements may drift apart over one lease. Refused unless
# FENCE_AFTER_SECONDS + SKEW_SECONDS < LEASE_SECONDS (the margin is the difference) and RENEW_SECONDS is at most half
# of FENCE_AFTER_SECONDS (a holder gets at least two tries before it fences).
#
# The failsafe (optional; on at every site or at none): a holder that loses the witness but still reaches every
# other site's cluster keeps serving. Each site's cluster holds a second Lease, FAILSAFE_LEASE in that site's
# namespace, through which the holder and that site's gate agree:
#   - the holder, when a renewal at the witness is not answered, claims FAILSAFE_LEASE on every other site (holder
#     identity its own, conditional on the version it read); when every site accepted, its fencing deadline counts
#     from the start of that round as from an accepted renewal. A site whose FAILSAFE_LEASE another site's gate
#     claims (an identity SITE/... of that site) does not confirm, nor does one that does not answer.
#   - a gate may take over an unrenewed Lease only after it claimed its own site's FAILSAFE_LEASE, which it may when
#     the Lease is released, is its own site's, is absent, or has not changed for LEASE_SECONDS + SKEW_SECONDS of its
#     own clock (counted from the first time it saw that version, exactly as for the Lease). A gate whose take at
#     the witness then fails gives its claim up.
# A round the holder counts from was written after it started and is seen by the gate after it was written, so the
# rule above holds for the failsafe too: no gate claims before the holder has fenced.
#
# The writers (optional, for a pod): the gate copies SERVE_FROM's files into SERVE_DIR once it holds the Lease, and
# the writers (Headscale, Litestream) read their config from there; the fence empties SERVE_DIR first, so a writer
# the kubelet restarts in place cannot start again, and then stops each process named in STOP, in order (SIGTERM;
# SIGKILL after STOP_GRACE_SECONDS). Processes are found by name in /proc (a program's own name, or a shell script's):
# with the pod's process namespace shared, and every container running as one uid, no capability is needed. The
# stops must fit in the margin: STOP_GRACE_SECONDS times the number of names is at most LEASE_SECONDS - SKEW_SECONDS
# - FENCE_AFTER_SECONDS.
#
# Runs in docker.io/curlimages/curl (alpine: busybox ash + curl; no jq): POSIX sh, curl (7.55+, `-H @file`), and the
# busybox applets sleep, mktemp, sed, awk and date. The bearer token is never in a process's argv nor in a log line.
#
# Environment:
#   API_URL              the witness API server, https:// only
#   NAMESPACE, LEASE     the Lease's namespace and name (Kubernetes names)
#   IDENTITY             this holder: the site and the pod, e.g. hydra/headscale-5d9c7b-x2x7q (letters, digits, '.',
#                        '-', '_', '/', ':'; at most 128 characters)
#   LEASE_SECONDS        whole seconds a holder's renewal is good for (written to the Lease as leaseDurationSeconds)
#   SKEW_SECONDS         whole seconds: the bound on elapsed-time drift between sites
#   RENEW_SECONDS        how often the holder renews (hold; decimals allowed)
#   FENCE_AFTER_SECONDS  when the holder fences, after the start of its last accepted renewal (decimals allowed)
#   RETRY_SECONDS        optional: how often the gate looks at the Lease (acquire; default RENEW_SECONDS)
#   STATE_DIR            absolute: written by acquire (fencing, resource-version, renewed-at), read by hold
#   TOKEN_FILE, CA_FILE  absolute: the witness's bearer token and CA bundle, read again for every request
#   CURL_BIN             optional: the curl to run (default curl)
#   TMPDIR               optional: where the private work directory goes (default /tmp)
#   FAILSAFE_LEASE       optional: the failsafe's Lease in each site's namespace (a Kubernetes name); when set,
#                        IDENTITY is SITE/POD and:
#   LOCAL_API_URL        (acquire) this site's own API server, https:// only
#   LOCAL_DIR            (acquire) absolute: a directory with token, ca.crt and namespace, as a ServiceAccount mount
#   PEERS_DIR            (hold) absolute: a directory per other site, named for it, each holding api-url, token,
#                        ca.crt and namespace: credentials for that site's FAILSAFE_LEASE and nothing else
#   SERVE_DIR            optional, absolute: filled by acquire from SERVE_FROM (absolute), emptied by a fence
#   STOP                 optional (hold): the processes the fence stops, in order, each by its name: a process
#                        whose /proc/PID/comm is that name (at most 15 characters, as the kernel keeps it), or a shell
#                        (sh, ash, dash, bash, busybox) whose first argument is a script of that name
#   STOP_GRACE_SECONDS   optional (hold): how long each gets after SIGTERM (default 2)
#   READY_URL            optional (hold): the writer's readiness, http:// or https:// (in the pod: 127.0.0.1)
#   READY_WITHIN_SECONDS (hold, with READY_URL): how long after the take the writer may take to answer it
#   POD_NAME, POD_UID    optional (hold): after a fence, delete this pod (name and uid, from the downward API)
#                        through LOCAL_API_URL with LOCAL_DIR's token (a token bound to the pod), so that it is
#                        replaced; both LOCAL_* are then required for hold too
#
# Log lines (stderr) start with the monotonic time they were written at (seconds since boot), so that two processes
# on one machine can be compared: "acquired fencing=N", "fenced: why" (when the deadline passed: the monotonic time
# the last accepted renewal was sent at), "released", "ready: URL answers", "gave up: why",
# "failsafe: serving on the word of every site",
# "failsafe: over". Renewals are not logged.
#
# Exit codes: 0 acquired (acquire) or released (hold); 2 bad invocation; 3 no private work directory; 5 fenced.
#
# Never run with `set -x`: the token passes through a file descriptor only, but a trace prints the header file name
# and every body.
set -eu

PROG=witness-lease
EX_USAGE=2
EX_TEMP=3
EX_FENCED=5

uptime_now() {
    read -r NOW _ </proc/uptime
}

say() {
    uptime_now
    printf '%s %s: %s\n' "$NOW" "$PROG" "$1" >&2
}

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: die require_absolute

# seconds NAME VALUE: a positive number of seconds, whole or with a fraction (0.5, 2, 2.25).
seconds() {
    case "$2" in
        '' | .* | *. | *[!0-9.]* | *.*.*) die "$EX_USAGE" "$1 must be a positive number of seconds such as 5 or 0.5 \
(got '$2')." ;;
    esac
    awk -v v="$2" 'BEGIN { exit !(v > 0) }' || die "$EX_USAGE" "$1 must be more than 0 seconds (got '$2')."
}

whole() {
    case "$2" in
        '' | *[!0-9]* | 0*) die "$EX_USAGE" "$1 must be a whole number of seconds, at least 1 (got '$2')." ;;
    esac
}

# below A B: true when A < B (decimals).
below() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'
}

# --- inputs -------------------------------------------------------------------------------------------------------
COMMAND=${1:-}
case "$COMMAND" in
    acquire | hold | follow | watch) ;;
    *) die "$EX_USAGE" "usage: witness-lease.sh acquire|hold|follow|watch (got '$COMMAND')." ;;
esac
API_URL=${API_URL:-}
NAMESPACE=${NAMESPACE:-}
LEASE=${LEASE:-}
IDENTITY=${IDENTITY:-}
LEASE_SECONDS=${LEASE_SECONDS:-}
SKEW_SECONDS=${SKEW_SECONDS:-}
RENEW_SECONDS=${RENEW_SECONDS:-}
FENCE_AFTER_SECONDS=${FENCE_AFTER_SECONDS:-}
RETRY_SECONDS=${RETRY_SECONDS:-$RENEW_SECONDS}
STATE_DIR=${STATE_DIR:-}
TOKEN_FILE=${TOKEN_FILE:-}
CA_FILE=${CA_FILE:-}
CURL_BIN=${CURL_BIN:-curl}
FAILSAFE_LEASE=${FAILSAFE_LEASE:-}
LOCAL_API_URL=${LOCAL_API_URL:-}
LOCAL_DIR=${LOCAL_DIR:-}
PEERS_DIR=${PEERS_DIR:-}
SERVE_DIR=${SERVE_DIR:-}
SERVE_FROM=${SERVE_FROM:-}
STOP=${STOP:-}
STOP_GRACE_SECONDS=${STOP_GRACE_SECONDS:-2}
POD_NAME=${POD_NAME:-}
POD_UID=${POD_UID:-}
READY_URL=${READY_URL:-}
READY_WITHIN_SECONDS=${READY_WITHIN_SECONDS:-}

# https_url NAME VALUE: prints VALUE without a trailing '/'.
https_url() {
    case "$2" in
        https://?*) printf '%s\n' "${2%/}" ;;
        *) die "$EX_USAGE" "$1 must be an https:// URL (the token never travels in clear; got '$2')." ;;
    esac
}
API_URL=$(https_url API_URL "$API_URL") || exit "$EX_USAGE"
# kube_name NAME VALUE: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.
kube_name() {
    case "$2" in
        '' | [!a-z0-9]* | *[!a-z0-9] | *[!a-z0-9.-]*) die "$EX_USAGE" "$1 must be a Kubernetes name: lowercase \
letters, digits, '-' and '.', starting and ending with a letter or digit (got '$2')." ;;
    esac
}
kube_name NAMESPACE "$NAMESPACE"
kube_name LEASE "$LEASE"
case "$IDENTITY" in
    '' | *[!A-Za-z0-9._/:-]*) die "$EX_USAGE" "IDENTITY must be letters, digits, '.', '-', '_', '/', ':' (got \
'$IDENTITY')." ;;
esac
[ "${#IDENTITY}" -le 128 ] || die "$EX_USAGE" "IDENTITY must be at most 128 characters (got '$IDENTITY')."
SITE=${IDENTITY%%/*}
case "$COMMAND:$FAILSAFE_LEASE:$READY_URL" in
    follow:?*:* | follow:*:?* | watch:?*:* | watch:*:?*)
        die "$EX_USAGE" "FAILSAFE_LEASE and READY_URL are a holder's, not a follower's ($COMMAND)."
        ;;
esac
case "$COMMAND:$IDENTITY" in
    follow:*/?* | watch:*/?*) kube_name "IDENTITY's site (before the '/')" "$SITE" ;;
    follow:* | watch:*) die "$EX_USAGE" "IDENTITY must be SITE/POD for $COMMAND (got '$IDENTITY')." ;;
esac
if [ -n "$FAILSAFE_LEASE" ]; then
    kube_name FAILSAFE_LEASE "$FAILSAFE_LEASE"
    case "$IDENTITY" in
        */?*) kube_name "IDENTITY's site (before the '/')" "$SITE" ;;
        *) die "$EX_USAGE" "IDENTITY must be SITE/POD with FAILSAFE_LEASE set (got '$IDENTITY')." ;;
    esac
    if [ "$COMMAND" = acquire ]; then
        LOCAL_API_URL=$(https_url LOCAL_API_URL "$LOCAL_API_URL") || exit "$EX_USAGE"
        require_absolute LOCAL_DIR "$LOCAL_DIR"
    else
        require_absolute PEERS_DIR "$PEERS_DIR"
        set -- "$PEERS_DIR"/*/
        [ -d "$1" ] || die "$EX_USAGE" "PEERS_DIR must hold a directory per other site (none in '$PEERS_DIR')."
        [ ! -d "$PEERS_DIR/$SITE" ] || die "$EX_USAGE" "PEERS_DIR must not hold this site's own directory \
('$PEERS_DIR/$SITE')."
    fi
fi
if [ -n "$POD_NAME" ]; then
    kube_name POD_NAME "$POD_NAME"
    case "$POD_UID" in
        '' | *[!0-9a-f-]*) die "$EX_USAGE" "POD_UID must be the pod's uid (metadata.uid) with POD_NAME set (got \
'$POD_UID')." ;;
    esac
    LOCAL_API_URL=$(https_url LOCAL_API_URL "$LOCAL_API_URL") || exit "$EX_USAGE"
    require_absolute LOCAL_DIR "$LOCAL_DIR"
fi
whole LEASE_SECONDS "$LEASE_SECONDS"
whole SKEW_SECONDS "$SKEW_SECONDS"
seconds RENEW_SECONDS "$RENEW_SECONDS"
seconds FENCE_AFTER_SECONDS "$FENCE_AFTER_SECONDS"
seconds RETRY_SECONDS "$RETRY_SECONDS"
awk -v f="$FENCE_AFTER_SECONDS" -v s="$SKEW_SECONDS" -v l="$LEASE_SECONDS" 'BEGIN { exit !(f + s < l) }' \
    || die "$EX_USAGE" "FENCE_AFTER_SECONDS + SKEW_SECONDS must be below LEASE_SECONDS: a holder must stop before \
another may take over (got $FENCE_AFTER_SECONDS + $SKEW_SECONDS, LEASE_SECONDS $LEASE_SECONDS)."
awk -v r="$RENEW_SECONDS" -v f="$FENCE_AFTER_SECONDS" 'BEGIN { exit !(2 * r <= f) }' \
    || die "$EX_USAGE" "RENEW_SECONDS must be at most half of FENCE_AFTER_SECONDS: two tries before fencing (got \
$RENEW_SECONDS, FENCE_AFTER_SECONDS $FENCE_AFTER_SECONDS)."
seconds STOP_GRACE_SECONDS "$STOP_GRACE_SECONDS"
stops=0
for name in $STOP; do
    case "$name" in
        *[!A-Za-z0-9._-]*) die "$EX_USAGE" "STOP must be process or script names (letters, digits, '.', '_', '-'; \
got '$name')." ;;
    esac
    [ "$name" != "${0##*/}" ] || die "$EX_USAGE" "STOP must not name this script ('$name'): the fence would stop \
itself before the writers."
    stops=$((stops + 1))
done
awk -v n="$stops" -v g="$STOP_GRACE_SECONDS" -v f="$FENCE_AFTER_SECONDS" -v s="$SKEW_SECONDS" \
    -v l="$LEASE_SECONDS" 'BEGIN { exit !(n * g + f + s <= l) }' || die "$EX_USAGE" "STOP_GRACE_SECONDS times the \
number of STOP names must fit in LEASE_SECONDS - SKEW_SECONDS - FENCE_AFTER_SECONDS: the writers stop before another \
may take over (got $stops x $STOP_GRACE_SECONDS, LEASE_SECONDS $LEASE_SECONDS, SKEW_SECONDS $SKEW_SECONDS, \
FENCE_AFTER_SECONDS $FENCE_AFTER_SECONDS)."
if [ -n "$READY_URL" ]; then
    case "$READY_URL" in
        http://?* | https://?*) ;;
        *) die "$EX_USAGE" "READY_URL must be an http:// or https:// URL (got '$READY_URL')." ;;
    esac
    seconds READY_WITHIN_SECONDS "$READY_WITHIN_SECONDS"
elif [ -n "$READY_WITHIN_SECONDS" ]; then
    die "$EX_USAGE" "READY_WITHIN_SECONDS needs READY_URL (what must answer within it)."
fi
if [ -n "$SERVE_DIR" ]; then require_absolute SERVE_DIR "$SERVE_DIR"; fi
if [ -n "$SERVE_FROM" ]; then
    require_absolute SERVE_FROM "$SERVE_FROM"
    [ -n "$SERVE_DIR" ] || die "$EX_USAGE" "SERVE_FROM needs SERVE_DIR (where its files go)."
fi
require_absolute STATE_DIR "$STATE_DIR"
require_absolute TOKEN_FILE "$TOKEN_FILE"
require_absolute CA_FILE "$CA_FILE"
command -v "$CURL_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "CURL_BIN '$CURL_BIN' is not an executable."

umask 077
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX" 2>/dev/null) || die "$EX_TEMP" "no private work directory under \
${TMPDIR:-/tmp}."
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$STATE_DIR"

leases() {
    printf '/apis/coordination.k8s.io/v1/namespaces/%s/leases' "$1"
}
COLLECTION=$(leases "$NAMESPACE")
LEASE_PATH="$COLLECTION/$LEASE"

# at_witness, at_site URL DIR: where the next calls go (a site's DIR holds token, ca.crt and namespace).
at_witness() {
    TARGET_URL=$API_URL
    TARGET_TOKEN=$TOKEN_FILE
    TARGET_CA=$CA_FILE
}
at_site() {
    TARGET_URL=${1%/}
    TARGET_TOKEN=$2/token
    TARGET_CA=$2/ca.crt
    TARGET_LEASES=$(leases "$(cat "$2/namespace" 2>/dev/null)")
}
at_witness

# call METHOD PATH BODY MAX_SECONDS: sets STATUS (000: no answer) and leaves the answer in $WORK/body.
call() {
    { printf 'Authorization: Bearer '; cat "$TARGET_TOKEN"; } >"$WORK/auth" 2>/dev/null || : >"$WORK/auth"
    : >"$WORK/body"
    if [ -n "$3" ]; then
        printf '%s' "$3" >"$WORK/request"
        STATUS=$("$CURL_BIN" -sS -o "$WORK/body" -w '%{http_code}' --max-time "$4" --cacert "$TARGET_CA" \
            -H @"$WORK/auth" -H "Content-Type: $CONTENT_TYPE" -X "$1" --data-binary @"$WORK/request" \
            "$TARGET_URL$2" 2>"$WORK/error") || STATUS=000
    else
        STATUS=$("$CURL_BIN" -sS -o "$WORK/body" -w '%{http_code}' --max-time "$4" --cacert "$TARGET_CA" \
            -H @"$WORK/auth" -X "$1" "$TARGET_URL$2" 2>"$WORK/error") || STATUS=000
    fi
}

# field NAME: a string or number field of the Lease in $WORK/body (its keys are unique in a Lease; managedFields
# spell them "f:NAME"), or empty. The API server indents its answer to curl (one field a line, a space after the
# colon), and may not.
field() {
    sed -n "s/.*\"$1\":[[:space:]]*\"\{0,1\}\([^\",}[:space:]]*\).*/\1/p" "$WORK/body" | head -n 1
}

# answer: what the witness (or curl) said, on one line, at most 300 characters: never a header, so never the token.
answer() {
    cat "$WORK/error" "$WORK/body" 2>/dev/null | tr '\n' ' ' | head -c 300
}

micro_time() {
    date -u +%Y-%m-%dT%H:%M:%S.000000Z
}

# write_lease COLLECTION NAME VERSION SPEC MAX_SECONDS: at the current target, create the Lease (VERSION 'absent')
# or patch it conditionally on VERSION; true when written.
write_lease() {
    if [ "$3" = absent ]; then
        CONTENT_TYPE=application/json
        call POST "$1" "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\
\"$2\"},\"spec\":{$4}}" "$5"
        [ "$STATUS" = 201 ]
    else
        CONTENT_TYPE=application/merge-patch+json
        call PATCH "$1/$2" "{\"metadata\":{\"resourceVersion\":\"$3\"},\"spec\":{$4}}" "$5"
        [ "$STATUS" = 200 ]
    fi
}

# claim_spec: a failsafe Lease's spec naming this IDENTITY.
claim_spec() {
    printf '"holderIdentity":"%s","leaseDurationSeconds":%s,"renewTime":"%s"' "$IDENTITY" "$LEASE_SECONDS" \
        "$(micro_time)"
}

# expired_since SEEN_AT: true when LEASE_SECONDS + SKEW_SECONDS have passed on this clock (NOW) since SEEN_AT.
expired_since() {
    ! below "$NOW" "$(awk -v t="$1" -v l="$LEASE_SECONDS" -v s="$SKEW_SECONDS" 'BEGIN { printf "%.3f", t + l + s }')"
}

# --- acquire -------------------------------------------------------------------------------------------------------
# take VERSION TRANSITIONS: the conditional write that makes this IDENTITY the holder; true when it did.
take() {
    taken_at=$(micro_time)
    uptime_now
    sent=$NOW
    write_lease "$COLLECTION" "$LEASE" "$1" "\"holderIdentity\":\"$IDENTITY\",\"leaseDurationSeconds\":\
$LEASE_SECONDS,\"acquireTime\":\"$taken_at\",\"renewTime\":\"$taken_at\",\"leaseTransitions\":$2" "$RETRY_SECONDS" \
        || return 1
    printf '%s\n' "$2" >"$STATE_DIR/fencing"
    field resourceVersion >"$STATE_DIR/resource-version"
    printf '%s\n' "$sent" >"$STATE_DIR/renewed-at"
    rm -f "$STATE_DIR/fenced"
    say "acquired fencing=$2"
    serve
    return 0
}

# serve: the writers' config, into SERVE_DIR (after the take: a writer never starts before its site holds the Lease).
# Emptied first: a gate run again in the same pod (its sandbox recreated) finds its last copy, read-only files that
# cp cannot overwrite, and perhaps files its ConfigMaps no longer hold.
serve() {
    [ -n "$SERVE_FROM" ] || return 0
    unserve
    mkdir -p "$SERVE_DIR"
    for item in "$SERVE_FROM"/*; do
        if [ -e "$item" ]; then cp -RL "$item" "$SERVE_DIR/"; fi
    done
}

# watch_claim: (failsafe) looks at this site's FAILSAFE_LEASE and sets claim_version ('absent' when there is none)
# and claim_free (yes when this gate may claim it now: absent, released, this site's own, or unchanged for
# LEASE_SECONDS + SKEW_SECONDS since this gate first saw its version). Without the failsafe, always free.
watch_claim() {
    claim_free=yes
    [ -n "$FAILSAFE_LEASE" ] || return 0
    claim_free=no
    at_site "$LOCAL_API_URL" "$LOCAL_DIR"
    call GET "$TARGET_LEASES/$FAILSAFE_LEASE" "" "$RETRY_SECONDS"
    at_witness
    case "$STATUS" in
        404)
            claim_version=absent
            claim_free=yes
            ;;
        200)
            claim_version=$(field resourceVersion)
            claimant=$(field holderIdentity)
            uptime_now
            if [ -z "$claimant" ] || [ "${claimant%%/*}" = "$SITE" ]; then
                claim_free=yes
            elif [ "$claim_version" != "$claim_seen_version" ]; then
                [ "$claimant" = "$claim_seen_by" ] || say "waiting: $claimant claims the failsafe"
                claim_seen_version=$claim_version
                claim_seen_by=$claimant
                claim_seen_at=$NOW
            elif expired_since "$claim_seen_at"; then
                claim_free=yes
            fi
            ;;
        *) say "own cluster answered $STATUS: $(answer)" ;;
    esac
}

# claim_failsafe: (failsafe) the conditional write of this IDENTITY into this site's FAILSAFE_LEASE, which makes
# every failsafe round of the old holder fail from now on; true when written (always, without the failsafe).
claim_failsafe() {
    [ -n "$FAILSAFE_LEASE" ] || return 0
    at_site "$LOCAL_API_URL" "$LOCAL_DIR"
    claimed=no
    if write_lease "$TARGET_LEASES" "$FAILSAFE_LEASE" "$claim_version" "$(claim_spec)" "$RETRY_SECONDS"; then
        claimed=$(field resourceVersion)
    fi
    at_witness
    [ "$claimed" != no ]
}

# unclaim_failsafe: a take that failed gives its claim up (best effort: a claim left behind costs the holder its
# failsafe, never its lease).
unclaim_failsafe() {
    [ -n "$FAILSAFE_LEASE" ] || return 0
    at_site "$LOCAL_API_URL" "$LOCAL_DIR"
    write_lease "$TARGET_LEASES" "$FAILSAFE_LEASE" "$claimed" '"holderIdentity":""' "$RETRY_SECONDS" || :
    at_witness
}

# gave_up_elsewhere HOLDER: true when HOLDER is '!SITE' for another site than this one: that site's holder gave the
# Lease up (its pod never became ready), its writers stopped first.
gave_up_elsewhere() {
    case "$1" in
        '!'*) [ "${1#!}" != "$SITE" ] ;;
        *) return 1 ;;
    esac
}

acquire() {
    seen_version=
    seen_at=
    claim_seen_version=
    claim_seen_by=
    claim_seen_at=
    while :; do
        call GET "$LEASE_PATH" "" "$RETRY_SECONDS"
        case "$STATUS" in
            200 | 404)
                if [ "$STATUS" = 404 ]; then
                    version=absent
                    holder="nobody (no lease)"
                    transitions=0
                else
                    version=$(field resourceVersion)
                    holder=$(field holderIdentity)
                    transitions=$(field leaseTransitions)
                    transitions=$((${transitions:-0} + 1))
                fi
                uptime_now
                if [ -z "$holder" ] || [ "$holder" = "$IDENTITY" ] || gave_up_elsewhere "$holder"; then
                    take "$version" "$transitions" && return 0
                else
                    if [ "$version" != "$seen_version" ]; then
                        seen_version=$version
                        seen_at=$NOW
                        say "waiting: held by $holder (version $version)"
                    fi
                    watch_claim
                    uptime_now
                    if expired_since "$seen_at" && [ "$claim_free" = yes ]; then
                        say "taking over: $holder has not renewed for $LEASE_SECONDS + $SKEW_SECONDS seconds"
                        if claim_failsafe; then
                            take "$version" "$transitions" && return 0
                            unclaim_failsafe
                        fi
                    fi
                fi
                ;;
            *) say "witness answered $STATUS: $(answer)" ;;
        esac
        sleep "$RETRY_SECONDS"
    done
}

# --- hold ----------------------------------------------------------------------------------------------------------
fence() {
    printf '%s\n' "$1" >"$STATE_DIR/fenced"
    say "fenced: $1"
    unserve
    for name in $STOP; do stop_named "$name"; done
    leave_pod
    exit "$EX_FENCED"
}

# leave_pod: with POD_NAME set, delete this very pod (POD_UID: never a successor of the same name) through this site's
# API server, so that it is replaced by a pod whose gate waits for the Lease and whose restore reads the new holder's
# backup. Tried every RETRY_SECONDS until the API server deletes it or says it is gone; the fence already holds.
leave_pod() {
    [ -n "$POD_NAME" ] || return 0
    at_site "$LOCAL_API_URL" "$LOCAL_DIR"
    CONTENT_TYPE=application/json
    pod_path="/api/v1/namespaces/$(cat "$LOCAL_DIR/namespace" 2>/dev/null)/pods/$POD_NAME"
    while :; do
        call DELETE "$pod_path" "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"preconditions\":\
{\"uid\":\"$POD_UID\"}}" "$RENEW_SECONDS"
        case "$STATUS" in
            200 | 202) say "deleting pod $POD_NAME"; return 0 ;;
            404 | 409) say "pod $POD_NAME ($POD_UID) is gone already"; return 0 ;;
        esac
        say "pod $POD_NAME not deleted (its API server answered $STATUS): $(answer)"
        sleep "$RETRY_SECONDS"
    done
}

# unserve: SERVE_DIR emptied, so that a writer restarted in place finds no config and cannot start.
unserve() {
    [ -n "$SERVE_DIR" ] || return 0
    for item in "$SERVE_DIR"/* "$SERVE_DIR"/.[!.]*; do
        if [ -e "$item" ] || [ -L "$item" ]; then rm -rf "$item"; fi
    done
}

# pids_named NAME: the processes named NAME (their /proc/PID/comm), and the shells running a script named NAME (their
# first argument's last component); never this shell.
pids_named() {
    for proc in /proc/[0-9]*; do
        [ "${proc#/proc/}" != "$$" ] || continue
        comm=
        read -r comm <"$proc/comm" 2>/dev/null || continue
        case "$comm" in
            "$1") printf '%s\n' "${proc#/proc/}" ;;
            sh | ash | dash | bash | busybox)
                script=$(tr '\000' '\n' <"$proc/cmdline" 2>/dev/null | sed -n 2p) || script=
                if [ "${script##*/}" = "$1" ]; then printf '%s\n' "${proc#/proc/}"; fi
                ;;
        esac
    done
}

# stop_named NAME: SIGTERM to every process NAME, SIGKILL to those left after STOP_GRACE_SECONDS.
stop_named() {
    pids=$(pids_named "$1")
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one word per pid
    kill -TERM $pids 2>/dev/null || :
    uptime_now
    until_at=$(awk -v n="$NOW" -v g="$STOP_GRACE_SECONDS" 'BEGIN { printf "%.3f", n + g }')
    while pids=$(pids_named "$1") && [ -n "$pids" ]; do
        uptime_now
        if ! below "$NOW" "$until_at"; then
            # shellcheck disable=SC2086 # one word per pid
            kill -KILL $pids 2>/dev/null || :
            say "killed $1 (still running $STOP_GRACE_SECONDS seconds after SIGTERM)"
            return 0
        fi
        sleep 0.1
    done
    say "stopped $1"
}

# check_ready: (READY_URL) ready=yes once READY_URL answers 200; gives the Lease up when it has not within
# READY_WITHIN_SECONDS of the take.
check_ready() {
    if "$CURL_BIN" -fsS -o /dev/null --max-time 1 "$READY_URL" 2>/dev/null; then
        ready=yes
        say "ready: $READY_URL answers"
        return 0
    fi
    uptime_now
    below "$NOW" "$(awk -v t="$taken_at" -v w="$READY_WITHIN_SECONDS" 'BEGIN { printf "%.3f", t + w }')" \
        || give_up "$READY_URL did not answer within $READY_WITHIN_SECONDS seconds of the take"
}

# give_up WHY: the writers stopped, then the Lease released as '!SITE' (conditional on the last renewal), this pod
# deleted; exits 5 like a fence. A release the witness refuses leaves the Lease to expire: the fence holds either way.
give_up() {
    printf '%s\n' "$1" >"$STATE_DIR/fenced"
    say "gave up: $1"
    unserve
    for name in $STOP; do stop_named "$name"; done
    CONTENT_TYPE=application/merge-patch+json
    call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$version\"},\"spec\":{\"holderIdentity\":\
\"!$SITE\"}}" "$RENEW_SECONDS"
    if [ "$STATUS" = 200 ]; then say "released to another site"; else say "not released (witness answered $STATUS)"; fi
    leave_pod
    exit "$EX_FENCED"
}

release() {
    unserve
    for name in $STOP; do stop_named "$name"; done
    CONTENT_TYPE=application/merge-patch+json
    call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$version\"},\"spec\":{\"holderIdentity\":\"\"}}" \
        "$RENEW_SECONDS"
    if [ "$STATUS" = 200 ]; then say "released"; else say "not released (witness answered $STATUS)"; fi
    exit 0
}

# pause_after SENT: sleeps until RENEW_SECONDS after SENT (a monotonic time), in the background, so that a trap
# (SIGTERM: release, stand down) runs at once.
pause_after() {
    uptime_now
    pause=$(awk -v s="$1" -v r="$RENEW_SECONDS" -v n="$NOW" 'BEGIN { p = s + r - n; printf "%.3f", (p > 0 ? p : 0) }')
    sleep "$pause" &
    wait $! || :
}

# time_left DEADLINE: sets left to what remains of DEADLINE, at most RENEW_SECONDS and at least a millisecond (a
# curl --max-time of 0 would wait for ever).
time_left() {
    uptime_now
    left=$(awk -v d="$1" -v n="$NOW" -v r="$RENEW_SECONDS" \
        'BEGIN { l = d - n; if (l > r) l = r; if (l < 0.001) l = 0.001; printf "%.3f", l }')
}

# confirm PEER: at the current target (PEER's cluster), claims its FAILSAFE_LEASE for this holder, unless PEER's
# own gate claims it (it is taking over); true when the claim was written within the deadline.
confirm() {
    time_left "$deadline"
    call GET "$TARGET_LEASES/$FAILSAFE_LEASE" "" "$left"
    case "$STATUS" in
        404) claim_version=absent ;;
        200)
            claimant=$(field holderIdentity)
            if [ -n "$claimant" ] && [ "${claimant%%/*}" = "$1" ]; then
                say "failsafe: $1 is taking over ($claimant claims its failsafe)"
                return 1
            fi
            claim_version=$(field resourceVersion)
            ;;
        *)
            say "failsafe: $1 answered $STATUS"
            return 1
            ;;
    esac
    uptime_now
    below "$NOW" "$deadline" || return 1
    time_left "$deadline"
    write_lease "$TARGET_LEASES" "$FAILSAFE_LEASE" "$claim_version" "$(claim_spec)" "$left" && return 0
    say "failsafe: $1 refused the claim ($STATUS)"
    return 1
}

# failsafe_round: (failsafe) claims FAILSAFE_LEASE on every other site; true when every one accepted, with round_at
# the moment the round started (every claim was written after it).
failsafe_round() {
    [ -n "$FAILSAFE_LEASE" ] || return 1
    uptime_now
    round_at=$NOW
    for peer_dir in "$PEERS_DIR"/*/; do
        peer_dir=${peer_dir%/}
        at_site "$(cat "$peer_dir/api-url" 2>/dev/null)" "$peer_dir"
        confirm "${peer_dir##*/}" || {
            at_witness
            return 1
        }
    done
    at_witness
    if [ "$failsafe" = off ]; then
        failsafe=on
        say "failsafe: serving on the word of every site"
    fi
}

hold() {
    version=$(cat "$STATE_DIR/resource-version" 2>/dev/null) || version=
    renewed_at=$(cat "$STATE_DIR/renewed-at" 2>/dev/null) || renewed_at=
    if [ -z "$version" ] || [ -z "$renewed_at" ]; then fence "no lease acquired in $STATE_DIR"; fi
    if [ -n "$FAILSAFE_LEASE" ]; then
        for peer_dir in "$PEERS_DIR"/*/; do
            https_url "${peer_dir}api-url" "$(cat "${peer_dir}api-url" 2>/dev/null)" >/dev/null
        done
    fi
    failsafe=off
    taken_at=$renewed_at
    ready=yes
    if [ -n "$READY_URL" ]; then ready=no; fi
    trap release TERM INT
    while :; do
        uptime_now
        deadline=$(awk -v t="$renewed_at" -v f="$FENCE_AFTER_SECONDS" 'BEGIN { printf "%.3f", t + f }')
        below "$NOW" "$deadline" || fence "no renewal accepted for $FENCE_AFTER_SECONDS seconds (the last one \
sent at $renewed_at)"
        sent=$NOW
        time_left "$deadline"
        CONTENT_TYPE=application/merge-patch+json
        call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$version\"},\"spec\":{\"renewTime\":\
\"$(micro_time)\"}}" "$left"
        case "$STATUS" in
            200)
                [ "$(field holderIdentity)" = "$IDENTITY" ] || fence "the lease is $(field holderIdentity)'s"
                version=$(field resourceVersion)
                renewed_at=$sent
                if [ "$failsafe" = on ]; then
                    failsafe=off
                    say "failsafe: over"
                fi
                if [ "$ready" = no ]; then check_ready; fi
                ;;
            409)
                time_left "$deadline"
                call GET "$LEASE_PATH" "" "$left"
                if [ "$STATUS" = 200 ] && [ "$(field holderIdentity)" = "$IDENTITY" ]; then
                    version=$(field resourceVersion)
                    continue
                fi
                if [ "$STATUS" = 200 ]; then fence "the lease is $(field holderIdentity)'s"; fi
                if [ "$STATUS" = 404 ]; then fence "the lease is gone from the witness"; fi
                ;;
            404) fence "the lease is gone from the witness" ;;
            *)
                say "renewal not accepted (witness answered $STATUS): $(answer)"
                if failsafe_round; then renewed_at=$round_at; fi
                ;;
        esac
        pause_after "$sent"
    done
}

# --- follow and watch -------------------------------------------------------------------------------------------------
# ours HOLDER: true when HOLDER is this site's (SITE/...).
ours() {
    case "$1" in
        "$SITE"/?*) return 0 ;;
        *) return 1 ;;
    esac
}

# observe MAX_SECONDS: one read of the Lease; sets holder, version, transitions and read_at (when the read started);
# 404 leaves version 'absent'. False, after a log line, when the witness did not answer 200 or 404.
observe() {
    uptime_now
    read_at=$NOW
    call GET "$LEASE_PATH" "" "$1"
    case "$STATUS" in
        200)
            holder=$(field holderIdentity)
            version=$(field resourceVersion)
            transitions=$(field leaseTransitions)
            transitions=${transitions:-0}
            ;;
        404)
            holder=
            version=absent
            transitions=
            ;;
        *)
            say "witness answered $STATUS: $(answer)"
            return 1
            ;;
    esac
}

# proven: after observe, the follower's deadline moved to FENCE_AFTER_SECONDS after the last read's start when the
# version is newer than that read's and held by this site or by nobody (every taker counts from after that write);
# then this read becomes the last read.
proven() {
    if [ "$version" != absent ] && [ -n "$last_version" ] && [ "$version" != "$last_version" ] \
        && { [ -z "$holder" ] || ours "$holder"; }; then
        deadline=$(awk -v t="$last_read_at" -v f="$FENCE_AFTER_SECONDS" 'BEGIN { printf "%.3f", t + f }')
    fi
    last_version=$version
    last_read_at=$read_at
}

follow() {
    last_version=
    last_read_at=
    deadline=0
    epoch=
    since=
    seen=
    while :; do
        if observe "$RETRY_SECONDS"; then
            proven
            uptime_now
            if ! ours "$holder" || [ "$version" = absent ]; then
                epoch=
                [ "$holder" = "$seen" ] || say "waiting: held by ${holder:-nobody}"
                seen=$holder
            elif [ "$transitions" != "$epoch" ]; then
                epoch=$transitions
                since=$NOW
                seen=$holder
                say "waiting: $holder holds it (fencing=$epoch); following a lease after"
            elif expired_since "$since" && below "$NOW" "$deadline"; then
                printf '%s\n' "$epoch" >"$STATE_DIR/fencing"
                printf '%s %s %s\n' "$last_version" "$last_read_at" "$deadline" >"$STATE_DIR/followed"
                rm -f "$STATE_DIR/fenced"
                say "following fencing=$epoch"
                serve
                return 0
            fi
        fi
        sleep "$RETRY_SECONDS"
    done
}

stand_down() {
    unserve
    for name in $STOP; do stop_named "$name"; done
    say "stood down"
    exit 0
}

watch() {
    read -r last_version last_read_at deadline <"$STATE_DIR/followed" 2>/dev/null || deadline=
    [ -n "$deadline" ] || fence "no holding followed in $STATE_DIR"
    trap stand_down TERM INT
    while :; do
        uptime_now
        below "$NOW" "$deadline" || fence "no renewal by $SITE seen for $FENCE_AFTER_SECONDS seconds (the last \
proof from a read started at $last_read_at)"
        sent=$NOW
        time_left "$deadline"
        if observe "$left"; then
            [ "$version" != absent ] || fence "the lease is gone from the witness"
            if [ -n "$holder" ] && ! ours "$holder"; then fence "the lease is $holder's"; fi
            proven
        fi
        pause_after "$sent"
    done
}

"$COMMAND"
