#!/bin/bash
# Break (low, unclear message): fewer than 12 non-magic bytes after an xz stream (or as the
# whole input) were reported as "unexpected end of data: the input ends inside a stream
# header", as if a second stream had been cut short. xz -d says the file format is wrong.
# Expected: "garbage after the end of an xz stream" (or "not xz data") at the garbage's offset.
# Usage: repro/xz-short-trailing-garbage.sh [path/to/sluice]
set -u
S=${1:-.build/release/sluice}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
export SLUICE_STATE_DIR=$d/state
printf 'hello\n' | xz -c > "$d/a.xz"
{ cat "$d/a.xz"; printf 'junk'; } > "$d/junk.xz"
printf 'x' > "$d/x.xz"
for f in junk.xz x.xz; do
    "$S" -q "read $d/$f | unxz | file $d/out"
    echo "$f exit $?"
done
