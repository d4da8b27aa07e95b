#!/bin/bash
# Break (low, unclear message): a server that sends one 1 MiB response header line makes
# fetch fail with "transfer of URL failed: Out of memory" (libcurl 7.88's CURLE_OUT_OF_MEMORY
# for a header over its limit), which blames the machine, not the server. Many header lines
# adding up to the same size get "Too large response headers: … > 307200", which is clear.
# Expected: exit 3 naming the oversized response header. Usage: repro/huge-header-out-of-memory.sh [sluice]
set -u
S=${1:-.build/release/sluice}
d=$(mktemp -d); export SLUICE_STATE_DIR=$d/state
cat > "$d/srv.py" <<'PY'
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header('X-Junk', 'a' * (1 << 20))
        self.send_header('Content-Length', '0'); self.end_headers()
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H); print(s.server_address[1], flush=True); s.serve_forever()
PY
coproc SRV { python3 "$d/srv.py" 2>/dev/null; }
read -r port <&"${SRV[0]}"
"$S" -q --retries 0 "fetch http://127.0.0.1:$port/x | file $d/out"; echo "exit $?"
kill "$SRV_PID"; rm -rf "$d"
