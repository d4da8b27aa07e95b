#!/usr/bin/env bash
# Benchmarks/untar.sh — `sluice 'fetch | verify | gunzip | untar'` against the shell pipelines
# that unpack a downloaded .tar.gz, on a generated source-tree-like corpus served by nginx.
#
# Usage: Benchmarks/untar.sh [--files N] [--mib M] [--runs R] [--where DIR] [--sync]
#   --files N   files in the corpus (default 50000)
#   --mib M     approximate corpus size in MiB before compression (default 1024)
#   --runs R    repetitions per command, interleaved; the median is reported (default 5)
#   --where DIR where the extractions go (default /dev/shm: tmpfs); e.g. the repo's disk
#   --sync      include `sync` in every command's time (for a disk)
# The corpus is cached in Benchmarks/.corpus/untar-N-M/ (gitignored).
set -euo pipefail
export LC_ALL=C

source "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
FILES=50000 MIB=1024 RUNS=5 WHERE=/dev/shm SYNC=0
parse_options --files FILES --mib MIB --runs RUNS --where WHERE --sync SYNC=1 -- "$@"
WHERE=$(cd -- "$WHERE" && pwd)   # absolute: nginx's prefix and the commands must agree
CACHE="$CACHE_DIR/untar-$FILES-$MIB"
mkdir -p "$CACHE"
if [[ ! -s $CACHE/corpus.tar.gz ]]; then
    echo "[untar] generating $FILES files, ~$MIB MiB" >&2
    rm -rf "$CACHE/tree"
    python3 - "$CACHE/tree" "$FILES" "$MIB" <<'EOF'
import os, random, sys
root, files, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261201)
words = [w.encode() for w in ("static int void return struct if else for while const char unsigned "
         "size_t buffer length error NULL include define uint8_t uint32_t case break switch "
         "sizeof memcpy malloc free printf the of to and a in is it for on that with as").split()]
pool = bytearray()
while len(pool) < 8 << 20:   # 8 MiB of code-like text to cut files from
    line = b" " * (4 * rng.randrange(0, 5)) + b" ".join(rng.choice(words) for _ in range(rng.randrange(2, 14)))
    pool += line + (b";\n" if rng.random() < 0.6 else b" {\n")
pool = bytes(pool)
# Sizes: log-normal around 6 KiB, a tail of large files, scaled to the requested total.
sizes = [int(rng.lognormvariate(8.7, 1.3)) for _ in range(files)]
for i in rng.sample(range(files), max(1, files // 2000)):
    sizes[i] = rng.randrange(5 << 20, 40 << 20)   # some large files (assets, blobs)
scale = (mib << 20) / sum(sizes)
dirs = [""]
for i, size in enumerate(sizes):
    if i % 15 == 0:
        parent = rng.choice(dirs)
        d = os.path.join(parent, rng.choice(["src", "lib", "include", "test", "doc", "drivers", "net", "fs", "arch"]) + str(i))
        if d.count("/") < 8:
            os.makedirs(os.path.join(root, d), exist_ok=True)
            dirs.append(d)
    d = rng.choice(dirs)
    n = int(size * scale)
    start = rng.randrange(0, len(pool) - 1)
    data = (pool[start:] + pool)[:n] if n > len(pool) - start else pool[start:start + n]
    if n > len(pool):
        data = (pool * (n // len(pool) + 1))[:n]
    with open(os.path.join(root, d, "f%d.%s" % (i, rng.choice(["c", "h", "txt", "py", "rs"]))), "wb") as f:
        f.write(data)
EOF
    tar -cf "$CACHE/corpus.tar" -C "$CACHE/tree" .
    gzip -6 -c "$CACHE/corpus.tar" > "$CACHE/corpus.tar.gz"
    sha256sum "$CACHE/corpus.tar.gz" | cut -d' ' -f1 > "$CACHE/corpus.sha256"
    rm -rf "$CACHE/tree"
fi
[[ -x $SLUICE ]] || { echo "build first: swift build -c release" >&2; exit 1; }
DIGEST=$(cat "$CACHE/corpus.sha256")
TAR_BYTES=$(stat -c %s "$CACHE/corpus.tar"); GZ_BYTES=$(stat -c %s "$CACHE/corpus.tar.gz")
MEMBERS=$(tar -tf "$CACHE/corpus.tar" | wc -l)

WORK=$(mktemp -d "$WHERE/sluice-untar-bench.XXXXXX")
trap '"$NGINX_STOP" "$WORK/nginx" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/nginx/www"
ln -s "$CACHE/corpus.tar.gz" "$WORK/nginx/www/corpus.tar.gz"
PORT=$("$NGINX_START" "$WORK/nginx" --root "$WORK/nginx/www")
URL="http://127.0.0.1:$PORT/corpus.tar.gz"

OUT="$WORK/out"
SYNC_CMD=""; ((SYNC)) && SYNC_CMD=" && sync"   # '&&': a failed command must not pass as sync's success
declare -A CMDS=(
    [sluice]="$SLUICE -q --engine isal 'fetch $URL | verify sha256:$DIGEST | gunzip | untar $OUT'$SYNC_CMD"
    [sluice-nockpt]="$SLUICE -q --engine isal --checkpoint-interval 0 'fetch $URL | verify sha256:$DIGEST | gunzip | untar $OUT'$SYNC_CMD"
    [igzip]="mkdir $OUT && curl -s $URL | tee >(openssl dgst -sha256 >/dev/null) | igzip -dc | tar -x -C $OUT$SYNC_CMD"
    [sha256sum]="mkdir $OUT && curl -s $URL | tee >(sha256sum >/dev/null) | tar -xz -C $OUT$SYNC_CMD"
    [tar-local]="mkdir $OUT && tar -x -C $OUT -f $CACHE/corpus.tar$SYNC_CMD"
)
ORDER=(sluice sluice-nockpt igzip sha256sum tar-local)
declare -A TIMES RSS CPU
for ((run = 1; run <= RUNS; run++)); do
    for name in "${ORDER[@]}"; do
        rm -rf "$OUT" "$OUT.sluice" "$OUT.sluice-part"; sync
        /usr/bin/time -f '%e %M %U %S' -o "$WORK/time" bash -c "set -o pipefail; ${CMDS[$name]}" >/dev/null 2>"$WORK/err" \
            || { echo "[untar] $name failed: $(tail -3 "$WORK/err")" >&2; exit 1; }
        if ((run == 1)); then   # every output checked once against the archive
            n=$(find "$OUT" -mindepth 1 | wc -l)
            ((n + 1 == MEMBERS)) || { echo "[untar] $name: $n entries, the archive has $MEMBERS" >&2; exit 1; }
        fi
        read -r secs rss user sys < "$WORK/time"
        cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
        echo "[untar] run $run $name: $secs s, CPU $cpu s, peak RSS $rss KiB" >&2
        TIMES[$name]+="$secs "; RSS[$name]+="$rss "; CPU[$name]+="$cpu "
    done
done
rm -rf "$OUT"

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "# untar benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, extraction on $(df -T "$WHERE" | awk 'NR == 2 { print $2 }') ($WHERE)$( ((SYNC)) && echo ', sync included')"
echo "# corpus: $MEMBERS members, tar $((TAR_BYTES >> 20)) MiB, gzip -6 $((GZ_BYTES >> 20)) MiB; $RUNS runs interleaved, median; RSS = largest process (KiB → MiB)"
echo "# CPU = user + system seconds of the command and the children it waited for (a shared machine's load changes wall times far more)"
best=""
for name in "${ORDER[@]}"; do
    m=$(echo "${TIMES[$name]}" | median); r=$(echo "${RSS[$name]}" | median); c=$(echo "${CPU[$name]}" | median)
    printf '%-14s %7.2f s  %7.1f MB/s (tar bytes)  CPU %6.2f s  RSS %6.1f MiB   [%s]\n' "$name" "$m" \
        "$(awk -v b="$TAR_BYTES" -v s="$m" 'BEGIN { print b / s / 1e6 }')" "$c" "$(awk -v k="$r" 'BEGIN { print k / 1024 }')" "${TIMES[$name]% }"
    eval "MED_${name//-/_}=$m"; eval "CPU_${name//-/_}=$c"
done
awk -v s="$MED_sluice" -v n="$MED_sluice_nockpt" -v i="$MED_igzip" -v h="$MED_sha256sum" 'BEGIN {
    printf "wall: sluice vs best shell pipeline (igzip): %.2fx;  vs tar -xz: %.2fx;  checkpoint cost: %+.1f%%\n", i / s, h / s, (s - n) / n * 100 }'
awk -v s="$CPU_sluice" -v n="$CPU_sluice_nockpt" -v i="$CPU_igzip" 'BEGIN {
    printf "CPU:  sluice vs igzip pipeline: %.2fx less CPU;  checkpoint cost: %+.1f%% CPU\n", i / s, (s - n) / n * 100 }'
