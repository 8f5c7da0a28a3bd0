#!/bin/sh
# The position recorder: copies the replica position the signer last signed into the Kubernetes API (the "served
# witness", a key of a ConfigMap such as headscale-served), so that a later restore can refuse a replica that was
# rolled back below a position this tailnet is known to have served. The record lives outside the NFS export, so
# whoever can write the export cannot roll it back with the replica.
#
# Runs as a native sidecar in docker.io/curlimages/curl (alpine: busybox ash + curl only; no jq, no kubectl), so:
# POSIX sh, curl (7.55+, for `-H @file`), and the busybox applets sleep, mktemp and sed (only to quote the API's
# message in a log line). Its own ServiceAccount token (a projected volume) may only get and patch that one ConfigMap.
#
#   sh position-recorder.sh    every INTERVAL_SECONDS: reads POSITION_FILE and, when it holds a valid position other
#                              than the one last recorded, merge-patches it into data.<DATA_KEY> of the ConfigMap; on
#                              SIGTERM or SIGINT it stops waiting, makes one last read-and-record attempt (the signer,
#                              stopped first, may have written its last position meanwhile), then exits 0
#
# Environment:
#   POSITION_FILE     the signer's position file (absolute): exactly one line "<16 lowercase hex txid> <UTC epoch
#                     seconds>" and its newline, written atomically by the signer (temp file, then rename). Anything
#                     else is never sent (it is logged, without its content)
#   NAMESPACE         the ConfigMap's namespace (a DNS label: lowercase letters, digits, '-')
#   CONFIG_MAP        the ConfigMap's name (a DNS subdomain: lowercase letters, digits, '-', '.'), e.g. headscale-served
#   DATA_KEY          optional: the key of its data the position goes into (default position; [A-Za-z0-9._-])
#   TOKEN_FILE        optional: the ServiceAccount token (absolute; default
#                     /var/run/secrets/headscale-ha/recorder/token); read again for every request (the kubelet
#                     rotates it)
#   CA_FILE           optional: the API server's CA bundle (absolute; default
#                     /var/run/secrets/headscale-ha/recorder/ca.crt); read again for every request
#   API_URL           optional: the API server, https:// only (the token never travels in clear); default
#                     https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6 host is bracketed; the port
#                     defaults to 443)
#   INTERVAL_SECONDS  optional: how often the file is read (default 5; a whole number or a decimal such as 0.5)
#   GIVE_UP_SECONDS   optional: how long a position may go unrecorded for any reason but a 404 before the recorder
#                     exits 4 (default 120, whole seconds): rollback protection is off while it cannot record, so the
#                     kubelet's restarts of this container are what the alert PositionNotRecorded watches
#   FIELD_MANAGER     optional: the server-side field manager of the patch (default headscale-ha-position-recorder)
#   CURL_BIN          optional: the curl to run (default curl)
#   TMPDIR            optional: where the private work directory goes (default /tmp; must be writable)
#
# Each request: PATCH $API_URL/api/v1/namespaces/$NAMESPACE/configmaps/$CONFIG_MAP?fieldManager=$FIELD_MANAGER with
# Content-Type application/merge-patch+json and the body {"data":{"<DATA_KEY>":"<txid> <epoch>"}}; HTTP 200 is a
# record. The bearer token is never in any process's argv nor in a log line: printf (a builtin) writes the
# Authorization header into a file of a private directory (umask 077), which curl reads with `-H @file`.
#
# Failures never stop the loop; the position is tried again every round until it is recorded. Logged on a change of
# state only: the file absent or malformed; the token or CA file missing; HTTP 404 (the ConfigMap does not exist yet:
# pulumi up writes it after the first ready rollout); 401 (the token is refused); 403 (the Role does not allow the
# patch); any other status; curl failing (exit code and message: API unreachable, TLS, timeout). The first record is
# logged, and so is the first record after a failure; other records are not.
#
# Exit codes:
#    0  stopped on SIGTERM or SIGINT (after the last attempt, whether or not it could record)
#    2  bad invocation: a variable missing or malformed, API_URL not https://, CURL_BIN not found
#    3  the private work directory could not be created under TMPDIR (read-only or full /tmp)
#    4  a position could not be recorded for GIVE_UP_SECONDS (anything but a 404: the API unreachable, the token
#       refused, the Role forbidding the patch); the kubelet restarts the container, which tries again
#
# Never run with `set -x`: the token passes through a shell variable.
set -eu

PROG=position-recorder
EX_USAGE=2
EX_TEMP=3
EX_NOT_RECORDING=4

# shellcheck source=shared.sh
. "$(dirname -- "$0")/shared.sh"  # shared: info die require_absolute

# dns_name NAME VALUE MAX_LENGTH EXTRA: lowercase letters, digits, '-' (and EXTRA), starting and ending with a letter
# or digit, at most MAX_LENGTH characters.
dns_name() {
    dn_ok=true
    case "$2" in
        '' | [!a-z0-9]* | *[!a-z0-9]) dn_ok=false ;;
    esac
    if [ "$4" = . ]; then
        case "$2" in *[!a-z0-9.-]* | *..*) dn_ok=false ;; esac
    else
        case "$2" in *[!a-z0-9-]*) dn_ok=false ;; esac
    fi
    [ "${#2}" -le "$3" ] || dn_ok=false
    [ "$dn_ok" = true ] || die "$EX_USAGE" "$1 must be a Kubernetes name: lowercase letters, digits, '-'$([ "$4" = . ] \
&& printf " and '.'"), starting and ending with a letter or digit, at most $3 characters (got '$2')."
}

# The interval may be a fraction (busybox and coreutils sleep take one): 0.2, 1, 2.5; never zero.
positive_interval() {
    pi_whole=${2%%.*}
    pi_fraction=
    case "$2" in *.*) pi_fraction=${2#*.} ;; esac
    pi_ok=true
    case "$pi_whole" in '' | *[!0-9]*) pi_ok=false ;; esac
    case "$2" in *.*) case "$pi_fraction" in '' | *[!0-9]*) pi_ok=false ;; esac ;; esac
    case "$pi_whole$pi_fraction" in *[1-9]*) ;; *) pi_ok=false ;; esac
    [ "$pi_ok" = true ] || die "$EX_USAGE" "$1 must be a positive number of seconds such as 5 or 0.5 (got '$2')."
}

# --- inputs ---------------------------------------------------------------------------------------------------
POSITION_FILE=${POSITION_FILE:-}
NAMESPACE=${NAMESPACE:-}
CONFIG_MAP=${CONFIG_MAP:-}
DATA_KEY=${DATA_KEY:-position}
TOKEN_FILE=${TOKEN_FILE:-/var/run/secrets/headscale-ha/recorder/token}
CA_FILE=${CA_FILE:-/var/run/secrets/headscale-ha/recorder/ca.crt}
INTERVAL_SECONDS=${INTERVAL_SECONDS:-5}
GIVE_UP_SECONDS=${GIVE_UP_SECONDS:-120}
FIELD_MANAGER=${FIELD_MANAGER:-headscale-ha-position-recorder}
CURL_BIN=${CURL_BIN:-curl}
API_URL=${API_URL:-}

require_absolute POSITION_FILE "$POSITION_FILE"
require_absolute TOKEN_FILE "$TOKEN_FILE"
require_absolute CA_FILE "$CA_FILE"
dns_name NAMESPACE "$NAMESPACE" 63 -
dns_name CONFIG_MAP "$CONFIG_MAP" 253 .
case "$DATA_KEY" in
    *[!A-Za-z0-9._-]*) die "$EX_USAGE" "DATA_KEY must be a ConfigMap key: letters, digits, '.', '_', '-' (got \
'$DATA_KEY')." ;;
esac
[ "${#DATA_KEY}" -le 253 ] || die "$EX_USAGE" "DATA_KEY must be at most 253 characters (got '$DATA_KEY')."
case "$FIELD_MANAGER" in
    '' | *[!A-Za-z0-9._:-]*) die "$EX_USAGE" "FIELD_MANAGER must be letters, digits, '.', '_', ':', '-' (got \
'$FIELD_MANAGER')." ;;
esac
[ "${#FIELD_MANAGER}" -le 128 ] || die "$EX_USAGE" "FIELD_MANAGER must be at most 128 characters (got \
'$FIELD_MANAGER')."
positive_interval INTERVAL_SECONDS "$INTERVAL_SECONDS"
case "$GIVE_UP_SECONDS" in
    '' | *[!0-9]* | 0*) die "$EX_USAGE" "GIVE_UP_SECONDS must be a positive whole number of seconds (got \
'$GIVE_UP_SECONDS')." ;;
esac

if [ -z "$API_URL" ]; then
    au_host=${KUBERNETES_SERVICE_HOST:-}
    au_port=${KUBERNETES_SERVICE_PORT:-443}
    case "$au_host" in
        '') die "$EX_USAGE" "API_URL is not set and neither is KUBERNETES_SERVICE_HOST (the kubelet sets it unless the \
pod has enableServiceLinks: false and no service environment); set API_URL to https://<api server>." ;;
        *[!A-Za-z0-9.:-]*) die "$EX_USAGE" "KUBERNETES_SERVICE_HOST must be a host name or an IP address (got \
'$au_host')." ;;
        *:*) au_host="[$au_host]" ;;
    esac
    case "$au_port" in
        '' | *[!0-9]*) die "$EX_USAGE" "KUBERNETES_SERVICE_PORT must be a port number (got '$au_port')." ;;
    esac
    API_URL="https://$au_host:$au_port"
fi
case "$API_URL" in
    https://*) ;;
    *) die "$EX_USAGE" "API_URL must start with https:// (got '$API_URL'): the ServiceAccount token is never sent in \
clear." ;;
esac
case "${API_URL#https://}" in
    '' | /* | *[[:space:]?#\"\'\\]*) die "$EX_USAGE" "API_URL must be https://<host>[:<port>][/<path>], without a \
query, fragment, quote or blank (got '$API_URL')." ;;
esac
API_URL=${API_URL%/}
command -v "$CURL_BIN" >/dev/null 2>&1 || die "$EX_USAGE" "CURL_BIN '$CURL_BIN' is not a command here (the \
curlimages/curl image has curl on PATH)."

URL="$API_URL/api/v1/namespaces/$NAMESPACE/configmaps/$CONFIG_MAP?fieldManager=$FIELD_MANAGER"
TARGET="configmap $NAMESPACE/$CONFIG_MAP (data.$DATA_KEY)"

umask 077
WORK=$(mktemp -d "${TMPDIR:-/tmp}/position-recorder.XXXXXX" 2>/dev/null) || die "$EX_TEMP" "Could not create a \
private work directory in '${TMPDIR:-/tmp}'. Mount a writable emptyDir there (or set TMPDIR)."
HEADER_FILE="$WORK/authorization"
BODY_FILE="$WORK/response"
ERROR_FILE="$WORK/curl-error"
trap 'rm -rf "$WORK"' EXIT

# --- one round ------------------------------------------------------------------------------------------------
POSITION=
FILE_STATE=
RECORDED=
RECORD_STATE=
RECORD_DETAIL=

# file_lines: LINE1, END1 (whether it ended with a newline) and MORE (whether anything follows it) of POSITION_FILE.
file_lines() {
    LINE1=
    END1=false
    MORE=false
    {
        if IFS= read -r LINE1; then
            END1=true
            fl_rest=
            if IFS= read -r fl_rest || [ -n "$fl_rest" ]; then
                MORE=true
            fi
        fi
    } <"$POSITION_FILE"
}

# read_position: POSITION (empty unless the file holds a valid position); logs a change of the file's state.
read_position() {
    POSITION=
    rp_state=ok
    if [ ! -e "$POSITION_FILE" ]; then
        rp_state="absent"
        rp_say="'$POSITION_FILE' does not exist yet (the signer writes it after its first signature); waiting."
    elif ! file_lines 2>/dev/null; then
        rp_state="unreadable"
        rp_say="'$POSITION_FILE' cannot be read (not a file, or permissions); waiting."
    else
        rp_say=
        if [ -z "$LINE1" ] && [ "$END1" = false ]; then
            rp_state="nothing"
        elif [ "$MORE" = true ]; then
            rp_state="more than one line"
        elif [ "$END1" = false ]; then
            rp_state="a line without its newline"
        else
            rp_txid=${LINE1%% *}
            rp_epoch=${LINE1#* }
            case "$rp_txid" in *[!0-9a-f]*) rp_state="malformed" ;; esac
            [ "${#rp_txid}" -eq 16 ] || rp_state="malformed"
            case "$rp_epoch" in '' | *[!0-9]*) rp_state="malformed" ;; esac
            [ "$rp_txid" != "$LINE1" ] || rp_state="malformed"
            # The state names the line's length only: its content is never shown.
            [ "$rp_state" = ok ] || rp_state="a line of ${#LINE1} characters not of the form '<16 lowercase hex> \
<epoch seconds>'"
        fi
        if [ "$rp_state" = ok ]; then
            POSITION=$LINE1
        else
            rp_say="'$POSITION_FILE' holds $rp_state: not recorded (the last record stays: ${RECORDED:-none})."
        fi
    fi
    if [ "$rp_state" != "$FILE_STATE" ]; then
        [ "$rp_state" = ok ] || info "$rp_say"
        FILE_STATE=$rp_state
    fi
}

# api_message: the "message" of the API's JSON answer (a Status), short, for a log line.
api_message() {
    am_message=$(sed -n -E 's/.*"message": *"(([^"\\]|\\.)*)".*/\1/p' "$BODY_FILE" 2>/dev/null |
        sed -E -e 's/\\"/"/g' -e 's/[^[:print:]]//g' -e 's/^(.{200}).*/\1.../') || am_message=
    [ -z "$am_message" ] || printf ': %s' "$am_message"
}

# patch_position: one PATCH of POSITION; sets RECORD_STATE (ok, or a short failure key) and RECORD_DETAIL.
patch_position() {
    RECORD_DETAIL=
    pp_token=
    if [ ! -f "$TOKEN_FILE" ] || ! { IFS= read -r pp_token <"$TOKEN_FILE" || [ -n "$pp_token" ]; } 2>/dev/null ||
        [ -z "$pp_token" ]; then
        RECORD_STATE=token-missing
        RECORD_DETAIL="the token file TOKEN_FILE='$TOKEN_FILE' is missing, unreadable or empty (the kubelet may not \
have written it yet; check the projected volume)"
        return 0
    fi
    case "$pp_token" in
        *[!A-Za-z0-9._~+/=-]*)
            RECORD_STATE=token-malformed
            RECORD_DETAIL="the token file TOKEN_FILE='$TOKEN_FILE' does not hold a bearer token (its first line has \
other characters than a JWT's; check the projected volume)"
            return 0
            ;;
    esac
    if [ ! -f "$CA_FILE" ] || [ ! -r "$CA_FILE" ]; then
        RECORD_STATE=ca-missing
        RECORD_DETAIL="the CA file CA_FILE='$CA_FILE' is missing or unreadable (check the projected volume)"
        return 0
    fi
    if ! printf 'Authorization: Bearer %s\n' "$pp_token" >"$HEADER_FILE" 2>/dev/null; then
        RECORD_STATE=header-write
        RECORD_DETAIL="could not write the request header into '$WORK' (TMPDIR full?)"
        return 0
    fi
    pp_token=
    pp_status=0
    # -q first: no .curlrc; --noproxy: the token goes to the API server itself, never through a proxy variable.
    pp_code=$("$CURL_BIN" -q -sS -g --noproxy '*' --max-time 10 --cacert "$CA_FILE" -X PATCH -H @"$HEADER_FILE" \
        -H 'Content-Type: application/merge-patch+json' --data-binary "{\"data\":{\"$DATA_KEY\":\"$POSITION\"}}" \
        -o "$BODY_FILE" -w '%{http_code}' "$URL" 2>"$ERROR_FILE") || pp_status=$?
    : >"$HEADER_FILE"
    if [ "$pp_status" -ne 0 ]; then
        pp_error=
        { IFS= read -r pp_error || true; } <"$ERROR_FILE" 2>/dev/null || true
        RECORD_STATE="curl-$pp_status"
        RECORD_DETAIL="curl failed (exit $pp_status${pp_error:+: $pp_error}): the API server at $API_URL is \
unreachable, its certificate does not verify against CA_FILE, or it did not answer within 10 s"
        return 0
    fi
    RECORD_STATE="http-$pp_code"
    case "$pp_code" in
        200) RECORD_STATE=ok ;;
        404) RECORD_DETAIL="the $TARGET does not exist yet (HTTP 404; pulumi up writes it after the first ready \
rollout)" ;;
        401) RECORD_DETAIL="the API server refused the token from '$TOKEN_FILE' (HTTP 401$(api_message)): expired or \
not a token of this cluster" ;;
        403) RECORD_DETAIL="the ServiceAccount may not patch the $TARGET (HTTP 403$(api_message)): check its Role \
(get and patch on that ConfigMap's resourceName)" ;;
        *) RECORD_DETAIL="the API server answered HTTP $pp_code$(api_message)" ;;
    esac
}

# record: PATCH the valid position when it differs from the last one recorded; logs a change of state.
record() {
    [ -n "$POSITION" ] || return 0
    [ "$POSITION" != "$RECORDED" ] || return 0
    patch_position
    if [ "$RECORD_STATE" = ok ]; then
        rc_after=
        [ -z "$RECORD_LAST" ] || [ "$RECORD_LAST" = ok ] || rc_after=" (after: $RECORD_LAST)"
        if [ -z "$RECORDED" ]; then
            info "recorded the first position ($POSITION) into the $TARGET$rc_after."
        elif [ -n "$rc_after" ]; then
            info "recorded the position $POSITION into the $TARGET$rc_after."
        fi
        RECORDED=$POSITION
    elif [ "$RECORD_STATE" != "$RECORD_LAST" ]; then
        info "warning: could not record the position $POSITION: $RECORD_DETAIL; retrying every ${INTERVAL_SECONDS}s."
    fi
    RECORD_LAST=$RECORD_STATE
    give_up_when_not_recording
}
RECORD_LAST=
FAILING_SINCE=

# give_up_when_not_recording: exit 4 once positions have gone unrecorded for GIVE_UP_SECONDS. A 404 does not count:
# pulumi up writes the ConfigMap after the first ready rollout, and the restore refuses a served site without it.
give_up_when_not_recording() {
    if [ "$RECORD_STATE" = ok ] || [ "$RECORD_STATE" = http-404 ]; then
        FAILING_SINCE=
        return 0
    fi
    gu_now=$(date -u +%s)
    FAILING_SINCE=${FAILING_SINCE:-$gu_now}
    [ $((gu_now - FAILING_SINCE)) -ge "$GIVE_UP_SECONDS" ] || return 0
    [ "$STOPPING" = false ] || return 0
    info "ERROR: the position $POSITION has not been recorded for $((gu_now - FAILING_SINCE)) s ($RECORD_DETAIL): \
rollback protection of the next restore rests on the age check alone until it is. Exiting $EX_NOT_RECORDING so \
that the container's restarts show it (alert PositionNotRecorded)."
    rm -rf "$WORK"
    trap - EXIT
    exit "$EX_NOT_RECORDING"
}

round() {
    read_position
    record
}

# --- the loop -------------------------------------------------------------------------------------------------
STOPPING=false
SLEEPER=
trap 'STOPPING=true; if [ -n "$SLEEPER" ]; then kill "$SLEEPER" 2>/dev/null || true; fi' TERM INT
info "recording the position in '$POSITION_FILE' into the $TARGET at $API_URL (every ${INTERVAL_SECONDS}s, field \
manager $FIELD_MANAGER)."
while [ "$STOPPING" = false ]; do
    round
    [ "$STOPPING" = false ] || break
    sleep "$INTERVAL_SECONDS" &
    SLEEPER=$!
    # A signal between the check above and here found no sleeper to stop.
    if [ "$STOPPING" = true ]; then
        kill "$SLEEPER" 2>/dev/null || true
    fi
    wait "$SLEEPER" 2>/dev/null || true
    SLEEPER=
done
# The signer stops first; its last signature's position is recorded now.
round
if [ -n "$POSITION" ] && [ "$POSITION" != "$RECORDED" ]; then
    info "stopped; the last position $POSITION could not be recorded (${RECORD_STATE}); the $TARGET holds \
${RECORDED:-what an earlier run recorded}."
else
    info "stopped; the $TARGET holds ${RECORDED:-no position from this run}."
fi
rm -rf "$WORK"
trap - EXIT
exit 0
