#!/usr/bin/env python3
"""The mixed benchmark corpus: prose-like lines, structured records (JSON lines and CSV),
and incompressible blocks, in segments of 16 KiB .. 1 MiB. Same seed -> same bytes.

Usage: mixed.py SIZE_BYTES META_OUT [SEED]  -- writes SIZE_BYTES bytes to stdout and
"raw_bytes=N" / "raw_sha256=HEX" lines to META_OUT. Any change to the bytes it writes must
bump the corpus version in Benchmarks/lib/corpus.sh (the cache key)."""
import hashlib, itertools, random, sys

size, meta_path = int(sys.argv[1]), sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20240229

rng = random.Random(seed)
out = sys.stdout.buffer
digest = hashlib.sha256()
written = 0

def emit(b):
    global written
    out.write(b)
    digest.update(b)
    written += len(b)

# A vocabulary of pseudo-words with English-like letter frequencies, used with Zipf weights.
letters = "etaoinshrdlcumwfgypbvkjxqz"
letter_w = [12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4,
            2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.07]
vocab = {}
while len(vocab) < 6000:
    vocab["".join(rng.choices(letters, weights=letter_w, k=rng.randint(1, 11)))] = None
vocab = list(vocab)
cum = list(itertools.accumulate(1.0 / (i + 1) ** 1.05 for i in range(len(vocab))))
line_lengths = [rng.randint(5, 18) for _ in range(997)]
endings = [".\n"] * 6 + ["?\n", "!\n", ";\n", ":\n"]

def text_segment(n):
    parts, got, li = [], 0, 0
    while got < n:
        words = rng.choices(vocab, cum_weights=cum, k=4096)
        lines, i = [], 0
        while i < len(words):
            k = line_lengths[li % len(line_lengths)]
            li += 1
            lines.append(" ".join(words[i:i + k]).capitalize() + endings[li % len(endings)])
            i += k
        chunk = "".join(lines).encode()
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)[:n]

LEVELS = ["INFO"] * 8 + ["DEBUG"] * 5 + ["WARN"] * 2 + ["ERROR"]
METHODS = ["GET"] * 10 + ["POST"] * 4 + ["PUT", "DELETE"]
RESOURCES = ["users", "orders", "items", "sessions", "invoices", "search", "carts", "reviews"]
STATUSES = [200] * 24 + [201, 204, 301, 304, 400, 403, 404, 500]
record_id = 1_000_000
clock_ms = 1_700_000_000_000

def record_segment(n, csv):
    global record_id, clock_ms
    lines, got = [], 0
    while got < n:
        record_id += 1
        r = rng.getrandbits(64)
        clock_ms += 1 + (r & 0x3FF)
        level = LEVELS[(r >> 10) & 15]
        method = METHODS[(r >> 14) & 15]
        res = RESOURCES[(r >> 18) & 7]
        status = STATUSES[(r >> 21) & 31]
        host = (r >> 26) & 31
        obj = (r >> 31) & 0xFFFFF
        nbytes = (r >> 51) & 0x1FFF
        ms = (r >> 40) & 0x7FF
        if csv:
            line = "%d,%d,%s,node-%02d,%s,/api/v1/%s/%d,%d,%d,%d.%02d\n" % (
                record_id, clock_ms, level, host, method, res, obj, status, nbytes, ms // 100, ms % 100)
        else:
            line = ('{"id":%d,"ts":%d,"level":"%s","host":"node-%02d","method":"%s",'
                    '"path":"/api/v1/%s/%d","status":%d,"bytes":%d,"latency_ms":%d.%02d}\n') % (
                record_id, clock_ms, level, host, method, res, obj, status, nbytes, ms // 100, ms % 100)
        lines.append(line)
        got += len(line)
    return "".join(lines).encode()[:n]

while written < size:
    n = min(rng.randint(16 << 10, 1 << 20), size - written)
    kind = rng.random()
    if kind < 0.45:
        emit(text_segment(n))
    elif kind < 0.85:
        emit(record_segment(n, csv=kind >= 0.65))
    else:
        emit(rng.randbytes(n))   # incompressible: gzip stores these blocks
out.flush()
with open(meta_path, "w") as f:
    f.write("raw_bytes=%d\nraw_sha256=%s\n" % (written, digest.hexdigest()))
