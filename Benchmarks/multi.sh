#!/usr/bin/env bash
# Benchmarks/multi.sh — `fetch URL connections=N` against aria2c, on nginx throttled per
# connection (limit_rate), into a verified, decompressed file.
#
#   sluice 'fetch URL connections=N | verify sha256:H | gunzip | file OUT'   N = 1, 4, 8, 16
#   aria2c -x8 -s8 URL && openssl dgst -sha256 FILE && igzip -dc FILE > OUT
#
# plus peak RSS at N = 16, and N = 4 against N = 1 on unthrottled loopback. Times are
# hyperfine medians. Usage: Benchmarks/multi.sh [--size MB] [--rate RATE] [--runs N] [--paced]
#
# nginx's limit_rate lets each *request* send one second's worth at once, which a client
# asking for many small ranges exploits; --paced serves the throttled URL from
# Benchmarks/paced_server.py instead (a token bucket per connection, 64 KiB burst).
# Needs nginx, hyperfine, aria2c, igzip, openssl, GNU time (Scripts/setup --bench).

set -euo pipefail
export LC_ALL=C
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
SIZE_MB=170 RATE=20m RUNS=3 PACED=0
parse_options --size SIZE_MB --rate RATE --runs RUNS --paced PACED=1 -- "$@"

for tool in nginx hyperfine aria2c igzip openssl /usr/bin/time python3; do
    command -v "$tool" >/dev/null || { echo "multi.sh: '$tool' is missing (run Scripts/setup --bench)" >&2; exit 1; }
done

build_sluice >/dev/null

# A gzip corpus of at least SIZE_MB MB: base64 text of random bytes (gzip keeps ~76% of it).
mkdir -p "$CACHE_DIR"
CORPUS="$CACHE_DIR/multi-$SIZE_MB.gz"
if [ ! -s "$CORPUS" ]; then
    echo "[multi] generating a ${SIZE_MB} MB gzip corpus" >&2
    raw=$((SIZE_MB * 1000000 * 100 / 75))
    head -c $((raw * 3 / 4)) /dev/urandom | base64 -w 76 | gzip -1 > "$CORPUS.tmp"
    mv "$CORPUS.tmp" "$CORPUS"
fi
DIGEST=$(openssl dgst -sha256 -r "$CORPUS" | cut -d' ' -f1)
BYTES=$(stat -c %s "$CORPUS")
EXPECTED=$(igzip -dc "$CORPUS" | openssl dgst -sha256 -r | cut -d' ' -f1)

WORK=$(mktemp -d /tmp/sluice-multi.XXXXXX)
cleanup() {
    "$NGINX_STOP" "$WORK/slow" >/dev/null 2>&1 || true
    "$NGINX_STOP" "$WORK/fast" >/dev/null 2>&1 || true
    [ -n "${PACED_PID:-}" ] && kill "$PACED_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/root" "$WORK/out"
ln "$CORPUS" "$WORK/root/corpus.gz" 2>/dev/null || cp "$CORPUS" "$WORK/root/corpus.gz"
# One nginx throttled per connection, one not, serving the same root.
SLOW="http://127.0.0.1:$("$NGINX_START" "$WORK/slow" --root "$WORK/root" --limit-rate "$RATE")/corpus.gz"
FAST="http://127.0.0.1:$("$NGINX_START" "$WORK/fast" --root "$WORK/root")/corpus.gz"
SERVER="nginx limit_rate $RATE"
if ((PACED)); then
    PACED_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    rate_bytes=$(python3 -c "import sys; t=sys.argv[1].lower(); m={'k':1024,'m':1048576}; print(int(t[:-1])*m[t[-1]] if t[-1] in m else int(t))" "$RATE")
    python3 "$BENCH_DIR/paced_server.py" "$WORK/root/corpus.gz" "$PACED_PORT" "$rate_bytes" & PACED_PID=$!
    for _ in $(seq 50); do curl -sfI "http://127.0.0.1:$PACED_PORT/corpus.gz" >/dev/null && break; sleep 0.1; done
    SLOW="http://127.0.0.1:$PACED_PORT/corpus.gz"
    SERVER="paced_server.py $RATE"
fi
echo "[multi] corpus $BYTES bytes, $SERVER per connection, $RUNS runs each" >&2

sluice_cmd() { # URL N
    echo "$SLUICE --progress none 'fetch $1 connections=$2 | verify sha256:$DIGEST | gunzip | file $WORK/out/s$2' && rm -f $WORK/out/s$2"
}
aria_cmd="aria2c -q -x8 -s8 --allow-overwrite=true --auto-file-renaming=false -d $WORK/out -o a.gz $SLOW \
 && openssl dgst -sha256 $WORK/out/a.gz >/dev/null && igzip -dc $WORK/out/a.gz > $WORK/out/a && rm -f $WORK/out/a $WORK/out/a.gz"

# Every command's output checked once before timing.
for n in 1 4 8 16; do
    eval "$SLUICE --progress none 'fetch $SLOW connections=$n | verify sha256:$DIGEST | gunzip | file $WORK/out/check'"
    [ "$(openssl dgst -sha256 -r "$WORK/out/check" | cut -d' ' -f1)" = "$EXPECTED" ] || { echo "sluice N=$n: wrong output" >&2; exit 1; }
    rm -f "$WORK/out/check"
done
aria2c -q -x8 -s8 --allow-overwrite=true -d "$WORK/out" -o a.gz "$SLOW"
[ "$(openssl dgst -sha256 -r "$WORK/out/a.gz" | cut -d' ' -f1)" = "$DIGEST" ] || { echo "aria2c: wrong download" >&2; exit 1; }
rm -f "$WORK/out/a.gz"

hyperfine -r "$RUNS" --export-json "$WORK/slow.json" --style basic \
    -n "sluice N=1" "$(sluice_cmd "$SLOW" 1)" \
    -n "sluice N=4" "$(sluice_cmd "$SLOW" 4)" \
    -n "sluice N=8" "$(sluice_cmd "$SLOW" 8)" \
    -n "sluice N=16" "$(sluice_cmd "$SLOW" 16)" \
    -n "aria2c -x8 -s8 + openssl dgst + igzip -dc" "$aria_cmd" >&2
hyperfine -w 1 -r $((RUNS + 2)) --export-json "$WORK/fast.json" --style basic \
    -n "unthrottled sluice N=1" "$(sluice_cmd "$FAST" 1)" \
    -n "unthrottled sluice N=4" "$(sluice_cmd "$FAST" 4)" >&2

rss=$(peak_rss_kib "'$SLUICE' --progress none 'fetch $SLOW connections=16 | verify sha256:$DIGEST | gunzip | file $WORK/out/r'")

python3 - "$WORK/slow.json" "$WORK/fast.json" "$BYTES" "$SERVER" "$rss" <<'PY'
import json, sys
slow, fast = (json.load(open(p))["results"] for p in sys.argv[1:3])
size, rate, rss = int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
median = {r["command"]: r["median"] for r in slow + fast}
print(f"gzip corpus {size / 1e6:.0f} MB, {rate} per connection; hyperfine medians")
for name, seconds in median.items():
    print(f"  {name:45s} {seconds:7.2f} s  {size / seconds / 1e6:7.1f} MB/s (compressed)")
n1, n8 = median["sluice N=1"], median["sluice N=8"]
aria = median["aria2c -x8 -s8 + openssl dgst + igzip -dc"]
print(f"  N=8 vs N=1: {n1 / n8:.1f}x (target >= 6)")
print(f"  N=8 vs aria2c pipeline: {aria / n8:.2f}x (target >= 1.3)")
print(f"  peak RSS at N=16: {rss / 1024:.1f} MiB (target <= 64)")
u1, u4 = median["unthrottled sluice N=1"], median["unthrottled sluice N=4"]
print(f"  unthrottled N=4 vs N=1: {u1 / u4:.2f}x (target >= 1.0)")
PY
