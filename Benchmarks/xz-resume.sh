#!/usr/bin/env bash
# Benchmarks/xz-resume.sh SLUICE FILE.xz PLAIN_SIZE PLAIN_FILE — the resume bar of issue 12:
# SIGKILL when 80% of the output is written (whatever checkpoint precedes it), rerun, and
# compare with the last 20% of an uninterrupted run (from its progress events).
set -uo pipefail
S=$1; XZ=$2; PLAIN=$3; W=$(mktemp -d); cd "$W"
AT=$((PLAIN * 8 / 10))
start=$(date +%s.%N)
"$S" --progress json "read $XZ | unxz | file out" 2> events.txt
end=$(date +%s.%N)
t80=$(python3 -c "
import json
for l in open('events.txt'):
    if l.startswith('{'):
        e=json.loads(l)
        if e.get('event')=='progress' and e['output_bytes']>=$AT: print(e['time']); break")
rm -f out out.sluice*
mkfifo ev
"$S" --progress json "read $XZ | unxz | file out" 2> ev & P=$!
while read -r line; do
    if [[ $line =~ \"output_bytes\":([0-9]+) ]] && (( BASH_REMATCH[1] >= AT )); then kill -9 $P; break; fi
done < ev
wait $P 2>/dev/null
ck=$(python3 -c "import json; print(json.loads(open('out.sluice', 'rb').readline())['source']['offset'])")
r0=$(date +%s.%N); "$S" "read $XZ | unxz | file out" 2>/dev/null; r1=$(date +%s.%N)
cmp -s out "$4" && ok=identical || ok=DIFFERENT
python3 -c "
total=$end-$start; t80=$t80; rerun=$r1-$r0
last=total-t80
print(f'uninterrupted {total:.2f}s, last 20% {last:.2f}s; killed at 80% output, resumed from source byte $ck; rerun {rerun:.2f}s = {rerun/last:.2f}x the last 20% (bar: <= 1.25x + 1s = {1.25*last+1:.2f}s); output $ok')"
rm -rf "$W"
