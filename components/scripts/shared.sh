# shellcheck shell=sh
# The functions the scripts of this folder share, written once. A script takes the ones it uses with one line,
#   . "$(dirname -- "$0")/shared.sh"  # shared: info die require_absolute
# which sources this file when the script runs from this folder (as the tests run it). When a component renders
# the script into its ConfigMap (components/shell_scripts.py), that line becomes the text of the functions it
# names, in that order: the script a pod runs stands alone, as it always has. Each function reads the calling
# script's PROG, and require_absolute its EX_USAGE. A script that needs another wording defines its own.

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
