#!/usr/bin/env bash
# Benchmarks/zstd.sh — unzstd against `zstd -dc` on a cached zstd -19 single-frame corpus.
#
# Rows: unzstd (read | unzstd | file) at the default 8 MiB checkpoint interval, without
# checkpoints, and every 2 MiB (so the small default corpus has some: each one costs what
# its 8 MiB window costs to encode and fsync), zstd -dc > file; peak RSS of each.
# Usage: Benchmarks/zstd.sh [--size MIB] [--runs N]   (needs zstd, hyperfine, openssl)
# The issue-13 targets (fetch and read rows against the shell pipelines, on 1 GiB corpora
# served by nginx) are the z* rows of Benchmarks/run; the kill bar is Benchmarks/resume-bar.sh.
# The default 64 MiB keeps the one-time zstd -19 bearable on a shared 2-core machine;
# --size 256 or more amortizes sluice's ~30 ms start-up better.
set -euo pipefail
export LC_ALL=C
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
SIZE_MIB=64 RUNS=5
parse_options --size SIZE_MIB --runs RUNS -- "$@"
log() { printf '[zstd-bench] %s\n' "$*" >&2; }

mkdir -p "$CACHE_DIR"
CORPUS="$CACHE_DIR/zstd-${SIZE_MIB}MiB-19.zst"
if [[ ! -f "$CORPUS" ]]; then
    # Deterministic mixed data: per MiB, ~0.9 MiB of JSON-lines records and ~0.1 MiB of
    # AES-CTR keystream (incompressible, but the same on every machine).
    log "generating ${SIZE_MIB} MiB, zstd -19 -T2 (one-time; cached in Benchmarks/.corpus/)"
    # (head closes the generators' pipes early: no pipefail inside.)
    for ((i = 0; i < SIZE_MIB; i++)); do (set +o pipefail
        awk -v seed="$i" 'BEGIN {
            srand(20261201 + seed); split("stream sluice zstd frame block window resume checkpoint barrier offset literal sequence", w, " ")
            for (n = 0; n < 943718; n += length(s)) {
                s = sprintf("{\"id\":%d,\"ts\":%d,\"word\":\"%s\",\"level\":\"%s\",\"n\":%d,\"path\":\"/v1/%s/%d\"}\n",
                    seed * 100000 + n, 1700000000 + seed * 977 + int(n / 50), w[1 + int(rand() * 12)],
                    rand() < 0.9 ? "info" : "warn", int(rand() * 100000), w[1 + int(rand() * 12)], int(rand() * 5000))
                printf "%s", s
            }
        }' | head -c 943718
        openssl enc -aes-128-ctr -nosalt -K 000102030405060708090a0b0c0d0e0f -iv "$(printf '%032x' "$i")" \
            < /dev/zero 2>/dev/null | head -c $((1048576 - 943718)))
    done | zstd -19 -T2 -q -c > "$CORPUS.tmp"
    mv "$CORPUS.tmp" "$CORPUS"
fi
[[ -x "$SLUICE" ]] || build_sluice >&2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
zstd -dc "$CORPUS" > "$OUT/reference"
log "corpus: $(stat -c %s "$CORPUS") bytes -> $(stat -c %s "$OUT/reference") bytes; window $(zstd -lv "$CORPUS" 2>/dev/null | awk '/Window Size/ {print $3, $4}')"

hyperfine --runs "$RUNS" --warmup 1 --export-markdown "$OUT/table.md" \
    --prepare "rm -f $OUT/a $OUT/a.sluice $OUT/b $OUT/b.sluice $OUT/d $OUT/d.sluice" \
    -n "sluice read | unzstd | file" "$SLUICE 'read $CORPUS | unzstd | file $OUT/a'" \
    -n "sluice, no checkpoints" "$SLUICE --checkpoint-interval 0 'read $CORPUS | unzstd | file $OUT/b'" \
    -n "sluice, checkpoint every 2MiB" "$SLUICE --checkpoint-interval 2MiB 'read $CORPUS | unzstd | file $OUT/d'" \
    -n "zstd -dc > file" "zstd -dc $CORPUS > $OUT/c"
cat "$OUT/table.md"
rm -f "$OUT/a" "$OUT/a.sluice"
"$SLUICE" "read $CORPUS | unzstd | file $OUT/a" && cmp "$OUT/a" "$OUT/reference" && log "output identical to zstd -dc"
for cmd in "$SLUICE 'read $CORPUS | unzstd | file $OUT/a'" "zstd -dc $CORPUS > $OUT/c"; do
    rm -f "$OUT/a" "$OUT/a.sluice"
    rss=$(peak_rss_kib "$cmd")
    printf 'peak RSS %6d KiB  %s\n' "$rss" "${cmd//$OUT\//}"
done
