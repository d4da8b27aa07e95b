# Benchmarks/lib/common.sh — sourced by the stand-alone benchmark scripts (multi.sh, zstd.sh,
# xz.sh, untar.sh, resume-bar.sh) for what they all need: the paths, option parsing, the
# release binary, and peak RSS. It defines; it runs nothing and sets no shell options.

BENCH_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(cd -- "$BENCH_DIR/.." && pwd)
CACHE_DIR="$BENCH_DIR/.corpus"   # gitignored
SLUICE="$REPO_ROOT/.build/release/sluice"
NGINX_START="$REPO_ROOT/Scripts/nginx/start"   # DIR [--root PATH] [--limit-rate RATE]: prints the port
NGINX_STOP="$REPO_ROOT/Scripts/nginx/stop"     # DIR

# The calling script's header comment (after the #! line): its usage.
script_help() { awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; }

# parse_options [--with-operands] SPEC... -- "$@"
#   A SPEC is two words: "--size SIZE_MIB" stores the option's value in SIZE_MIB; "--sync
#   SYNC=1" sets SYNC to 1. -h/--help prints the script's header and exits 0; any other word
#   starting with "-" prints it to stderr and exits 2. With --with-operands the first other
#   word ends the options, and it and the rest are left in the array OPERANDS; without, such
#   a word is an error too.
parse_options() {
    local -A takes=() sets=()
    local with_operands=0
    if [[ $1 == --with-operands ]]; then with_operands=1; shift; fi
    while [[ $1 != -- ]]; do
        if [[ $2 == *=* ]]; then sets[$1]=$2; else takes[$1]=$2; fi
        shift 2
    done
    shift
    OPERANDS=()
    while (($#)); do
        if [[ $1 != -* ]] && ((with_operands)); then
            OPERANDS=("$@")
            return 0
        elif [[ $1 != -* ]]; then
            { printf '%s: unexpected argument %s\n' "${0##*/}" "$1"; script_help; } >&2
            exit 2
        elif [[ -n ${takes[$1]:-} ]]; then
            (($# >= 2)) || { printf '%s: %s needs a value\n' "${0##*/}" "$1" >&2; exit 2; }
            printf -v "${takes[$1]}" '%s' "$2"
            shift 2
        elif [[ -n ${sets[$1]:-} ]]; then
            printf -v "${sets[$1]%%=*}" '%s' "${sets[$1]#*=}"
            shift
        elif [[ $1 == -h || $1 == --help ]]; then
            script_help
            exit 0
        else
            { printf '%s: unknown option %s\n' "${0##*/}" "$1"; script_help; } >&2
            exit 2
        fi
    done
}

# build_sluice: builds (or brings up to date) the release binary; swift's lines go to stdout.
build_sluice() { (cd "$REPO_ROOT" && swift build -c release --product sluice); }

# peak_rss_kib 'SHELL COMMAND': runs the command with bash under GNU time and prints its peak
# resident set size in KiB; what the command writes and does not redirect is discarded. Fails
# when the command fails.
peak_rss_kib() {
    local report status=0
    report=$(mktemp)
    /usr/bin/time -f %M -o "$report" bash -c "$1" >/dev/null 2>&1 || status=$?
    tail -n 1 "$report"
    rm -f -- "$report"
    return "$status"
}
