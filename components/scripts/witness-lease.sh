#!/bin/sh
# The witness lease: who may serve the tailnet's one registry is who holds a coordination.k8s.io/v1 Lease on a third
# API server (the witness), outside both sites' clusters. Two commands, for the two halves of a serving pod's life:
#
#   sh witness-lease.sh acquire   the gate, before restore-before-serve: polls the Lease until this IDENTITY holds it,
#                                 then writes the fencing counter (the Lease's leaseTransitions after the take) and
#                                 what `hold` needs into STATE_DIR, and exits 0. It takes the Lease when it does not
#                                 exist (create), when its holder released it (an empty holderIdentity), when this
#                                 IDENTITY is its holder (a restart of this pod), or when the Lease has not changed for
#                                 LEASE_SECONDS + SKEW_SECONDS of this process's own monotonic clock. Every write is
#                                 conditional on the resourceVersion read before it: of two takers, one wins (409).
#   sh witness-lease.sh hold      the renewer, beside the serving containers: renews every RENEW_SECONDS, each renewal
#                                 conditional on the resourceVersion of the last; it fences when the Lease is another's
#                                 (a renewal refused with 409 and the holder changed) or when FENCE_AFTER_SECONDS have
#                                 passed since the start of the last renewal the witness accepted: writes
#                                 STATE_DIR/fenced (why) and exits 5. On SIGTERM or SIGINT it releases the Lease (empty
#                                 holderIdentity, conditional as ever) and exits 0: the pod is stopping, its writers
#                                 stopped first.
#
# The rule (why a fenced holder is stopped before anyone may take over): a taker counts LEASE_SECONDS + SKEW_SECONDS
# from the moment it first saw the Lease's current resourceVersion, which is after the holder sent the renewal that
# made it; the holder fences FENCE_AFTER_SECONDS after it sent that renewal. No wall clock is read for a decision
# (only /proc/uptime, which never jumps), so a skew between the sites' clocks does not matter; SKEW_SECONDS bounds how
# far two sites' elapsed-time measurements may drift apart over one lease. Refused unless
# FENCE_AFTER_SECONDS + SKEW_SECONDS < LEASE_SECONDS (the margin is the difference) and RENEW_SECONDS is at most half
# of FENCE_AFTER_SECONDS (a holder gets at least two tries before it fences).
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
#
# Log lines (stderr) start with the monotonic time they were written at (seconds since boot), so that two processes
# on one machine can be compared: "acquired fencing=N", "fenced: why" (when the deadline passed: the monotonic time
# the last accepted renewal was sent at), "released". Renewals are not logged.
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
    acquire | hold) ;;
    *) die "$EX_USAGE" "usage: witness-lease.sh acquire|hold (got '$COMMAND')." ;;
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

case "$API_URL" in
    https://?*) API_URL=${API_URL%/} ;;
    *) die "$EX_USAGE" "API_URL must be an https:// URL (the token never travels in clear; got '$API_URL')." ;;
esac
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
whole LEASE_SECONDS "$LEASE_SECONDS"
whole SKEW_SECONDS "$SKEW_SECONDS"
seconds RENEW_SECONDS "$RENEW_SECONDS"
seconds FENCE_AFTER_SECONDS "$FENCE_AFTER_SECONDS"
seconds RETRY_SECONDS "$RETRY_SECONDS"
below "$(awk -v f="$FENCE_AFTER_SECONDS" -v s="$SKEW_SECONDS" 'BEGIN { print f + s }')" "$LEASE_SECONDS" \
    || die "$EX_USAGE" "FENCE_AFTER_SECONDS + SKEW_SECONDS must be below LEASE_SECONDS: a holder must stop before \
another may take over (got $FENCE_AFTER_SECONDS + $SKEW_SECONDS, LEASE_SECONDS $LEASE_SECONDS)."
below "$(awk -v r="$RENEW_SECONDS" 'BEGIN { print 2 * r - 0.000001 }')" "$FENCE_AFTER_SECONDS" \
    || die "$EX_USAGE" "RENEW_SECONDS must be at most half of FENCE_AFTER_SECONDS: two tries before fencing (got \
$RENEW_SECONDS, FENCE_AFTER_SECONDS $FENCE_AFTER_SECONDS)."
require_absolute STATE_DIR "$STATE_DIR"
require_absolute TOKEN_FILE "$TOKEN_FILE"
require_absolute CA_FILE "$CA_FILE"
command -v "$CURL_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "CURL_BIN '$CURL_BIN' is not an executable."

umask 077
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX" 2>/dev/null) || die "$EX_TEMP" "no private work directory under \
${TMPDIR:-/tmp}."
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$STATE_DIR"

COLLECTION="/apis/coordination.k8s.io/v1/namespaces/$NAMESPACE/leases"
LEASE_PATH="$COLLECTION/$LEASE"

# call METHOD PATH BODY MAX_SECONDS: sets STATUS (000: no answer) and leaves the answer in $WORK/body.
call() {
    { printf 'Authorization: Bearer '; cat "$TOKEN_FILE"; } >"$WORK/auth" 2>/dev/null || : >"$WORK/auth"
    : >"$WORK/body"
    if [ -n "$3" ]; then
        printf '%s' "$3" >"$WORK/request"
        STATUS=$("$CURL_BIN" -sS -o "$WORK/body" -w '%{http_code}' --max-time "$4" --cacert "$CA_FILE" \
            -H @"$WORK/auth" -H "Content-Type: $CONTENT_TYPE" -X "$1" --data-binary @"$WORK/request" \
            "$API_URL$2" 2>"$WORK/error") || STATUS=000
    else
        STATUS=$("$CURL_BIN" -sS -o "$WORK/body" -w '%{http_code}' --max-time "$4" --cacert "$CA_FILE" \
            -H @"$WORK/auth" -X "$1" "$API_URL$2" 2>"$WORK/error") || STATUS=000
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

# --- acquire -------------------------------------------------------------------------------------------------------
# take RV TRANSITIONS: the conditional write that makes this IDENTITY the holder; true when it did.
take() {
    taken_at=$(micro_time)
    uptime_now
    sent=$NOW
    spec="\"holderIdentity\":\"$IDENTITY\",\"leaseDurationSeconds\":$LEASE_SECONDS,\"acquireTime\":\"$taken_at\",\
\"renewTime\":\"$taken_at\",\"leaseTransitions\":$2"
    if [ -z "$1" ]; then
        CONTENT_TYPE=application/json
        call POST "$COLLECTION" "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":\
{\"name\":\"$LEASE\",\"namespace\":\"$NAMESPACE\"},\"spec\":{$spec}}" "$RETRY_SECONDS"
        [ "$STATUS" = 201 ] || return 1
    else
        CONTENT_TYPE=application/merge-patch+json
        call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$1\"},\"spec\":{$spec}}" "$RETRY_SECONDS"
        [ "$STATUS" = 200 ] || return 1
    fi
    printf '%s\n' "$2" >"$STATE_DIR/fencing"
    field resourceVersion >"$STATE_DIR/resource-version"
    printf '%s\n' "$sent" >"$STATE_DIR/renewed-at"
    rm -f "$STATE_DIR/fenced"
    say "acquired fencing=$2"
    return 0
}

acquire() {
    seen_version=
    seen_at=
    while :; do
        call GET "$LEASE_PATH" "" "$RETRY_SECONDS"
        case "$STATUS" in
            404) take "" 0 && return 0 ;;
            200)
                version=$(field resourceVersion)
                holder=$(field holderIdentity)
                transitions=$(field leaseTransitions)
                transitions=$((${transitions:-0} + 1))
                uptime_now
                if [ -z "$holder" ] || [ "$holder" = "$IDENTITY" ]; then
                    take "$version" "$transitions" && return 0
                elif [ "$version" != "$seen_version" ]; then
                    seen_version=$version
                    seen_at=$NOW
                    say "waiting: held by $holder (version $version)"
                elif ! below "$NOW" "$(awk -v t="$seen_at" -v l="$LEASE_SECONDS" -v s="$SKEW_SECONDS" \
                    'BEGIN { printf "%.3f", t + l + s }')"; then
                    say "taking over: $holder has not renewed for $LEASE_SECONDS + $SKEW_SECONDS seconds"
                    take "$version" "$transitions" && return 0
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
    exit "$EX_FENCED"
}

release() {
    CONTENT_TYPE=application/merge-patch+json
    call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$version\"},\"spec\":{\"holderIdentity\":\"\"}}" \
        "$RENEW_SECONDS"
    if [ "$STATUS" = 200 ]; then say "released"; else say "not released (witness answered $STATUS)"; fi
    exit 0
}

hold() {
    version=$(cat "$STATE_DIR/resource-version" 2>/dev/null) || version=
    renewed_at=$(cat "$STATE_DIR/renewed-at" 2>/dev/null) || renewed_at=
    if [ -z "$version" ] || [ -z "$renewed_at" ]; then fence "no lease acquired in $STATE_DIR"; fi
    trap release TERM INT
    while :; do
        uptime_now
        deadline=$(awk -v t="$renewed_at" -v f="$FENCE_AFTER_SECONDS" 'BEGIN { printf "%.3f", t + f }')
        below "$NOW" "$deadline" || fence "no renewal accepted for $FENCE_AFTER_SECONDS seconds (the last one \
sent at $renewed_at)"
        sent=$NOW
        left=$(awk -v d="$deadline" -v n="$NOW" -v r="$RENEW_SECONDS" \
            'BEGIN { l = d - n; printf "%.3f", (l < r ? l : r) }')
        CONTENT_TYPE=application/merge-patch+json
        call PATCH "$LEASE_PATH" "{\"metadata\":{\"resourceVersion\":\"$version\"},\"spec\":{\"renewTime\":\
\"$(micro_time)\"}}" "$left"
        case "$STATUS" in
            200)
                [ "$(field holderIdentity)" = "$IDENTITY" ] || fence "the lease is $(field holderIdentity)'s"
                version=$(field resourceVersion)
                renewed_at=$sent
                ;;
            409)
                call GET "$LEASE_PATH" "" "$left"
                if [ "$STATUS" = 200 ] && [ "$(field holderIdentity)" = "$IDENTITY" ]; then
                    version=$(field resourceVersion)
                    continue
                fi
                if [ "$STATUS" = 200 ]; then fence "the lease is $(field holderIdentity)'s"; fi
                ;;
            *) say "renewal not accepted (witness answered $STATUS): $(answer)" ;;
        esac
        uptime_now
        pause=$(awk -v s="$sent" -v r="$RENEW_SECONDS" -v n="$NOW" \
            'BEGIN { p = s + r - n; printf "%.3f", (p > 0 ? p : 0) }')
        sleep "$pause" &
        wait $! || :
    done
}

"$COMMAND"
