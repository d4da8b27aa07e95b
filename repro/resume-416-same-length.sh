#!/bin/bash
# Break (low, misleading message + needless restart): a resume whose Range is answered 416
# with the SAME ETag and the SAME total length as the checkpoint is called "changed since the
# checkpoint (... HTTP 416: it is now N bytes)" with N the length the checkpoint already has,
# and the partial download is thrown away (a stdout sink exits 7, "remote changed").
# DESIGN §3 says "416 means done if N is the full length, else the remote changed", so the
# verdict follows the letter of the contract; the message contradicts itself.
# Usage: repro/resume-416-same-length.sh [path/to/sluice]
set -u
S=${1:-.build/release/sluice}
d=$(mktemp -d); export SLUICE_STATE_DIR=$d/state
head -c 6000000 /dev/urandom > "$d/data"
cat > "$d/srv.py" <<'PY'
import http.server, os, re, sys, time
DATA = open(sys.argv[1], 'rb').read(); MODE = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        r = self.headers.get('Range'); start = int(re.match(r'bytes=(\d+)-', r).group(1)) if r else 0
        if os.path.exists(MODE) and start > 0:   # the resume: 416, same validators and length
            self.send_response(416); self.send_header('ETag', '"v1"')
            self.send_header('Content-Range', 'bytes */%d' % len(DATA)); self.send_header('Content-Length', '0'); self.end_headers(); return
        body = DATA[start:]
        self.send_response(206 if start else 200); self.send_header('ETag', '"v1"')
        if start: self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, len(DATA) - 1, len(DATA)))
        self.send_header('Content-Length', str(len(body))); self.end_headers()
        try:
            for i in range(0, len(body), 65536): self.wfile.write(body[i:i + 65536]); time.sleep(0.02)
        except OSError: pass
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H); print(s.server_address[1], flush=True); s.serve_forever()
PY
coproc SRV { python3 "$d/srv.py" "$d/data" "$d/mode" 2>/dev/null; }
read -r port <&"${SRV[0]}"
"$S" -q --checkpoint-interval 256KiB "fetch http://127.0.0.1:$port/data | file $d/out" & p=$!
sleep 0.4; kill -INT $p; wait $p
touch "$d/mode"
"$S" "fetch http://127.0.0.1:$port/data | file $d/out"; echo "file sink: exit $?"
kill "$SRV_PID"; rm -rf "$d"
