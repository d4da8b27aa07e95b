#!/usr/bin/env bash
# Benchmarks/lib/corpus.sh — builds the benchmark corpora once and caches them in
# Benchmarks/.corpus/ (gitignored).
#
# Usage: Benchmarks/lib/corpus.sh NAME SIZE_MIB
#   Prints the path of the corpus' .meta file, key=value lines the driver reads:
#     file= bytes= sha256=          the file to serve (what fetch downloads)
#     raw_bytes= raw_sha256=        what decompressing it gives (the rows' expected output)
#     content= format= size_mib=    for the report header
#   A cached corpus is reused when its file still has the sha256 in its .meta.
#
# Adding a corpus = one `corpus` line and one build_NAME function (dashes become
# underscores) that writes the file to stdout and raw_bytes=/raw_sha256= lines to META.
# Bump its version whenever the bytes it makes change: the version is in the cache key.

set -euo pipefail
export LC_ALL=C

LIB_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
CACHE_DIR="$LIB_DIR/../.corpus"

declare -A VERSION=() SUFFIX=() CONTENT=() FORMAT=()
corpus() { # NAME VERSION SUFFIX CONTENT FORMAT
    VERSION[$1]=$2; SUFFIX[$1]=$3; CONTENT[$1]=$4; FORMAT[$1]=$5
}

# The deterministic mixed data (Benchmarks/lib/mixed.py): SIZE_BYTES to stdout, digest to META.
mixed() { python3 "$LIB_DIR/mixed.py" "$1" "$2"; }

# ---------------------------------------------------------------------------------------
# The corpora.  name  version  suffix  content  format
# ---------------------------------------------------------------------------------------
corpus mixed-gz 1 .gz "mixed data" "gzip -6"
build_mixed_gz() { # SIZE_BYTES META
    mixed "$1" "$2" | gzip -6 -n -c
}

# zstd, one frame each (-T2 only makes the one-time -19 bearable; it still writes one frame).
corpus mixed-zst19 1 .zst "mixed data" "zstd -19 -T2, one frame"
build_mixed_zst19() { mixed "$1" "$2" | zstd -19 -T2 -q -c; }
corpus mixed-zst3 1 .zst "mixed data" "zstd -3 (default level), one frame"
build_mixed_zst3() { mixed "$1" "$2" | zstd -3 -T2 -q -c; }

# xz: one block (what xz -T1 writes), and the multi-block files xz -T2 and Debian ship
# (24 MiB blocks at -6, both sizes in every block header: decoded in parallel).
corpus mixed-xz 1 .xz "mixed data" "xz -6 -T1, one block"
build_mixed_xz() { mixed "$1" "$2" | xz -6 -T1 -c; }
corpus mixed-xzmt 1 .xz "mixed data" "xz -6 -T2, 24 MiB blocks"
build_mixed_xzmt() { mixed "$1" "$2" | xz -6 -T2 -c; }

# ---------------------------------------------------------------------------------------
log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }
sha256_of() { openssl dgst -sha256 -r "$1" | awk '{print $1}'; }
meta_value() { sed -n "s/^$1=//p" "$2" | head -n 1; }

ensure() { # NAME SIZE_MIB
    local name=$1 size_mib=$2
    [[ -n "${VERSION[$name]:-}" ]] || die "unknown corpus '$name' (known: ${!VERSION[*]})"
    [[ "$size_mib" =~ ^[1-9][0-9]*$ ]] || die "corpus size '$size_mib' is not a positive number of MiB"
    mkdir -p -- "$CACHE_DIR"
    local base
    base="$(cd -- "$CACHE_DIR" && pwd)/$name-v${VERSION[$name]}-${size_mib}MiB"
    local file="$base${SUFFIX[$name]}" meta="$base.meta"
    if [[ -f "$file" && -f "$meta" ]]; then
        log "checking cached corpus $(basename -- "$file")"
        if [[ "$(sha256_of "$file")" == "$(meta_value sha256 "$meta")" ]]; then
            # A cache copied or moved from another checkout still names its old place.
            [[ "$(meta_value file "$meta")" == "$file" ]] || sed -i "s|^file=.*|file=$file|" "$meta"
            printf '%s\n' "$meta"
            return 0
        fi
        log "cached corpus does not match its recorded digest: rebuilding"
    fi
    log "building corpus $name: ${size_mib} MiB of ${CONTENT[$name]}, ${FORMAT[$name]} (once; cached in Benchmarks/.corpus/)"
    rm -f -- "$file" "$meta"
    local tmp_file="$file.partial.$$" tmp_meta="$meta.partial.$$" start=$SECONDS
    if ! "build_${name//-/_}" $((size_mib * 1024 * 1024)) "$tmp_meta" >"$tmp_file"; then
        rm -f -- "$tmp_file" "$tmp_meta"
        die "building corpus $name failed"
    fi
    local raw_bytes raw_sha
    raw_bytes=$(meta_value raw_bytes "$tmp_meta")
    raw_sha=$(meta_value raw_sha256 "$tmp_meta")
    [[ "$raw_bytes" =~ ^[0-9]+$ && "$raw_sha" =~ ^[0-9a-f]{64}$ ]] \
        || die "corpus $name: the generator wrote a bad summary: $(tr '\n' ' ' <"$tmp_meta")"
    {
        printf 'name=%s\nfile=%s\nbytes=%s\nsha256=%s\n' \
            "$name" "$file" "$(stat -c %s "$tmp_file")" "$(sha256_of "$tmp_file")"
        printf 'raw_bytes=%s\nraw_sha256=%s\n' "$raw_bytes" "$raw_sha"
        printf 'size_mib=%s\ncontent=%s\nformat=%s\n' "$size_mib" "${CONTENT[$name]}" "${FORMAT[$name]}"
    } >"$meta.tmp.$$"
    rm -f -- "$tmp_meta"
    mv -f -- "$tmp_file" "$file"
    mv -f -- "$meta.tmp.$$" "$meta"
    log "corpus $name ready in $((SECONDS - start)) s: $raw_bytes bytes -> $(meta_value bytes "$meta") bytes"
    printf '%s\n' "$meta"
}

(($# == 2)) || die "usage: Benchmarks/lib/corpus.sh NAME SIZE_MIB (corpora: ${!VERSION[*]})"
ensure "$1" "$2"
