#!/bin/bash
# Break (low, unclear message): a spec file saved with a UTF-8 byte-order mark (Windows
# editors) is refused as "unknown stage '\u{FEFF}read'". Expected: the BOM skipped, or a
# message saying the file starts with a byte-order mark. Usage: repro/spec-file-bom.sh [sluice]
set -u
S=${1:-.build/release/sluice}
d=$(mktemp -d); export SLUICE_STATE_DIR=$d/state
printf 'hi\n' > "$d/in"
printf '\xef\xbb\xbfread %s/in | file %s/out\n' "$d" "$d" > "$d/spec"
"$S" -q -f "$d/spec"; echo "exit $?"
rm -rf "$d"
