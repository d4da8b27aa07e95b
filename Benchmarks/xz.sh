#!/usr/bin/env bash
# Benchmarks/xz.sh — unxz against xz -dc (liblzma, 1 thread) and xz -T2 -dc.
#
# Generates (and caches in Benchmarks/.corpus/xz/) a deterministic mixed corpus, compresses
# it single-block (xz -6 -T1) and multi-block (xz -6 -T2), then times with hyperfine:
#   unxz without checkpoints vs xz -dc, unxz with default checkpoints (the checkpoint cost),
#   unxz on the multi-block file vs xz -T2 -dc (from the file, and fetched from nginx on
#   loopback through verify against curl | tee >(openssl dgst) | xz -T2 -dc); and peak RSS.
# Usage: Benchmarks/xz.sh [--size MIB] [--runs N] [--only-multi]
set -euo pipefail
export LC_ALL=C
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
SIZE_MIB=200 RUNS=5 ONLY_MULTI=0
parse_options --size SIZE_MIB --runs RUNS --only-multi ONLY_MULTI=1 -- "$@"
CACHE="$CACHE_DIR/xz/$SIZE_MIB"
mkdir -p "$CACHE"
build_sluice >&2

if [[ ! -f "$CACHE/plain" ]]; then
    echo "[xz] generating $SIZE_MIB MiB corpus" >&2
    python3 - "$CACHE/plain" "$SIZE_MIB" <<'PY'
import random, sys
path, mib = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261201)
words = [''.join(rng.choice('etaoinshrdlucmfwypvbgkqjxz') for _ in range(rng.randint(2, 10))) for _ in range(5000)]
total = mib << 20
with open(path, 'wb') as f:
    written = 0
    while written < total:
        kind = rng.random()
        if kind < 0.12:
            chunk = rng.randbytes(rng.randint(4096, 65536))
        elif kind < 0.4:
            chunk = ''.join('{"id":%d,"name":"%s","value":%.3f}\n' % (rng.randint(0, 10**6), rng.choice(words), rng.random() * 1000)
                            for _ in range(rng.randint(50, 500))).encode()
        else:
            chunk = ''.join(' '.join(rng.choice(words) for _ in range(rng.randint(5, 15))) + '.\n'
                            for _ in range(rng.randint(50, 500))).encode()
        chunk = chunk[:total - written]
        f.write(chunk)
        written += len(chunk)
PY
fi
[[ -f "$CACHE/multi.xz" ]] || { echo "[xz] xz -6 -T2" >&2; xz -6 -T2 -k -c "$CACHE/plain" > "$CACHE/multi.xz.tmp"; mv "$CACHE/multi.xz.tmp" "$CACHE/multi.xz"; }
if ((!ONLY_MULTI)) && [[ ! -f "$CACHE/single.xz" ]]; then
    echo "[xz] xz -6 -T1" >&2
    xz -6 -T1 -k -c "$CACHE/plain" > "$CACHE/single.xz.tmp" && mv "$CACHE/single.xz.tmp" "$CACHE/single.xz"
fi

WORK=$(mktemp -d)
trap '"$NGINX_STOP" "$WORK/nginx" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
cd "$WORK"
echo "[xz] load average: $(cut -d' ' -f1-3 /proc/loadavg); corpus $(stat -c %s "$CACHE/plain") bytes," \
     "multi.xz $(stat -c %s "$CACHE/multi.xz")"
mkdir -p nginx/root
ln -s "$CACHE/multi.xz" nginx/root/multi.xz
PORT=$("$NGINX_START" "$WORK/nginx")
URL="http://127.0.0.1:$PORT/multi.xz"
SHA=$(sha256sum "$CACHE/multi.xz" | cut -d' ' -f1)
hyperfine --shell bash --runs "$RUNS" --warmup 1 --prepare 'rm -f out out.sluice* sum' \
    -n "curl | tee >(openssl dgst) | xz -T2 -dc (multi)" \
    "curl -sf '$URL' | tee >(openssl dgst -sha256 > sum) | xz -T2 -dc > out" \
    -n "sluice fetch | verify | unxz | file (multi)" \
    "'$SLUICE' --progress none 'fetch $URL | verify sha256:$SHA | unxz | file out'" \
    -n "the same, --checkpoint-interval 0" \
    "'$SLUICE' --progress none --checkpoint-interval 0 'fetch $URL | verify sha256:$SHA | unxz | file out'"
cmp out "$CACHE/plain" && echo "[xz] fetched output checked"
rm -f out out.sluice*
echo "[xz] peak RSS fetch|verify|unxz|file multi: $(peak_rss_kib "'$SLUICE' --progress none 'fetch $URL | verify sha256:$SHA | unxz | file out'") KiB" >&2
((ONLY_MULTI)) && exit 0
hyperfine --runs "$RUNS" --warmup 1 --prepare 'rm -f out out.sluice*' \
    -n "xz -dc (single)" "xz -dc '$CACHE/single.xz' > out" \
    -n "unxz, no checkpoints (single)" "'$SLUICE' --checkpoint-interval 0 'read $CACHE/single.xz | unxz | file out'" \
    -n "unxz, default checkpoints (single)" "'$SLUICE' 'read $CACHE/single.xz | unxz | file out'" \
    -n "xz -T2 -dc (multi)" "xz -T2 -dc '$CACHE/multi.xz' > out" \
    -n "unxz (multi)" "'$SLUICE' 'read $CACHE/multi.xz | unxz | file out'"
for f in single multi; do
    rm -f out out.sluice*
    echo "[xz] peak RSS unxz $f: $(peak_rss_kib "'$SLUICE' 'read $CACHE/$f.xz | unxz | file out'") KiB" >&2
    echo "[xz] peak RSS xz -dc $f: $(peak_rss_kib "xz -dc '$CACHE/$f.xz' > out") KiB" >&2
done
cmp out "$CACHE/plain" && echo "[xz] output checked"
