#!/usr/bin/env bash
# Benchmarks/resume-bar.sh — the kill bar of issues 12 and 13: SIGKILL a run when 80% of its
# output is written (whatever checkpoint precedes that), rerun it, and compare the rerun with
# the last 20% of an uninterrupted run (taken from that run's progress events).
#   bar: rerun <= 1.25 x (uninterrupted time of the last 20%) + 1 s
#
# Usage: Benchmarks/resume-bar.sh [--stage WORD] [--runs N] [--interval SIZE] [--dir DIR] FILE
#   --stage      the decoding stage: unzstd (default), unxz, gunzip, decompress
#   --runs       kill/rerun pairs (default 3; each gets its own uninterrupted run before it)
#   --interval   --checkpoint-interval for every run (default: sluice's own)
#   --dir        where the outputs and checkpoints go (default: Benchmarks/.corpus, the
#                repository's disk; /dev/shm takes the disk's fsync out of the picture)
# Uses the release binary (.build/release/sluice; built when missing). Works in a temporary
# directory inside DIR, removed on exit.
set -uo pipefail
export LC_ALL=C
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
STAGE=unzstd RUNS=3 INTERVAL_SIZE="" DIR=$CACHE_DIR
parse_options --with-operands --stage STAGE --runs RUNS --interval INTERVAL_SIZE --dir DIR -- "$@"
INTERVAL=()
[[ -z "$INTERVAL_SIZE" ]] || INTERVAL=(--checkpoint-interval "$INTERVAL_SIZE")
((${#OPERANDS[@]} == 1)) && [[ -f "${OPERANDS[0]}" ]] || { script_help >&2; exit 2; }
INPUT=$(realpath -- "${OPERANDS[0]}")
[[ -x "$SLUICE" ]] || build_sluice >&2 || exit 1
mkdir -p "$DIR"
W=$(mktemp -d "$DIR/resume.XXXXXX")
P=
trap '[[ -n "$P" ]] && kill -9 "$P" 2>/dev/null; rm -rf "$W"' EXIT
cd "$W" || exit 1
SPEC="read $INPUT | $STAGE | file out"
now() { date +%s.%N; }

# The time (from the run's start) at which the output reached BYTES, interpolated between
# the progress events (and the final "done") on either side of it.
time_at() { # EVENTS BYTES
    python3 -c '
import json, sys
want, before = int(sys.argv[2]), (0.0, 0)
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        if e.get("event") not in ("progress", "done"):
            continue
        t, b = e["time"], e["output_bytes"]
        if b >= want:
            t0, b0 = before
            print(t0 + (t - t0) * (want - b0) / max(b - b0, 1)); break
        before = (t, b)' "$1" "$2"
}

printf '%-4s %9s %9s %10s %9s %9s %8s %-9s %s\n' run total last20% killed-at ckpt-src rerun ratio bar output
for ((r = 1; r <= RUNS; r++)); do
    rm -f out out.sluice* reference
    t0=$(now)
    "$SLUICE" "${INTERVAL[@]}" --progress json "$SPEC" 2>events.txt || { echo "uninterrupted run failed" >&2; exit 1; }
    t1=$(now)
    mv out reference
    plain=$(stat -c %s reference)
    at=$((plain * 8 / 10))
    t80=$(time_at events.txt "$at")

    # The killed run: its progress events arrive through a FIFO; SIGKILL at 80% of the output.
    rm -f out out.sluice* ev
    mkfifo ev
    "$SLUICE" "${INTERVAL[@]}" --progress json "$SPEC" 2>ev &
    P=$!
    killed_at=0
    while read -r line; do
        if [[ $line =~ \"output_bytes\":([0-9]+) ]] && ((BASH_REMATCH[1] >= at)); then
            kill -9 "$P"
            killed_at=${BASH_REMATCH[1]}
            break
        fi
    done <ev
    wait "$P" 2>/dev/null
    P=
    [[ -f out.sluice ]] || { echo "no checkpoint after the kill (the run ended before 80%?)" >&2; exit 1; }
    # The checkpoint's first line is its JSON (a binary appendix may follow).
    ck=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1], "rb").readline())["source"]["offset"])' out.sluice \
        2>/dev/null || echo '?')
    r0=$(now)
    "$SLUICE" "${INTERVAL[@]}" --progress none "$SPEC" 2>/dev/null
    r1=$(now)
    cmp -s out reference && ok=identical || ok=DIFFERENT
    python3 -c '
import sys
run, t0, t1, t80, r0, r1, killed, plain, ck, ok = sys.argv[1:]
total = float(t1) - float(t0); last = total - float(t80); rerun = float(r1) - float(r0)
bar = 1.25 * last + 1
print("%-4s %8.2fs %8.2fs %9.1f%% %9s %8.2fs %7.2fx %-9s %s" % (run, total, last, 100 * int(killed) / int(plain), ck,
      rerun, rerun / last, ("PASS" if rerun <= bar else "MISS") + " %.1fs" % bar, ok))' \
        "$r" "$t0" "$t1" "$t80" "$r0" "$r1" "$killed_at" "$plain" "$ck" "$ok"
done
echo "(ratio = rerun / last 20%; bar = 1.25 x last 20% + 1 s; ckpt-src = source offset the rerun resumed from)"
echo "input: $INPUT ($(stat -c %s "$INPUT") bytes -> $plain); spec: $SPEC ${INTERVAL[*]}; $(uptime)"
