#!/usr/bin/env python3
"""A throttled HTTP/1.1 file server for Benchmarks/multi.sh --paced.

nginx's limit_rate lets every request send one second's worth at once (limit_rate x
(elapsed + 1)), so a client that asks for many small ranges is barely throttled. This
server paces each connection with a token bucket (rate RATE bytes a second, burst 64 KiB)
that carries over between the requests of one keep-alive connection, as a per-connection
shaper would. Serves FILE at every path: GET/HEAD, one `Range: bytes=A-B` (or A-), a strong
ETag and Last-Modified.

Usage: paced_server.py FILE PORT RATE
"""
import email.utils
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH, PORT, RATE = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
SIZE = os.path.getsize(PATH)
MTIME = os.path.getmtime(PATH)
ETAG = '"%x-%x"' % (int(MTIME), SIZE)
LAST_MODIFIED = email.utils.formatdate(MTIME, usegmt=True)
BURST = 64 * 1024
PIECE = 64 * 1024


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.tokens = BURST
        self.refilled = time.monotonic()

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.respond(body=False)

    def do_GET(self):
        self.respond(body=True)

    def respond(self, body):
        first, last, status = 0, SIZE - 1, 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and "," not in wanted:
            a, _, b = wanted[6:].partition("-")
            if a.isdigit():
                first = int(a)
                last = min(int(b), SIZE - 1) if b.isdigit() else SIZE - 1
                status = 206
                if first >= SIZE or first > last:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % SIZE)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
        self.send_response(status)
        self.send_header("ETag", ETAG)
        self.send_header("Last-Modified", LAST_MODIFIED)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(last - first + 1))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
        self.end_headers()
        if not body:
            return
        with open(PATH, "rb") as f:
            f.seek(first)
            left = last - first + 1
            while left > 0:
                n = min(PIECE, left)
                self.pace(n)
                data = f.read(n)
                self.wfile.write(data)
                left -= len(data)

    def pace(self, n):
        while True:
            now = time.monotonic()
            self.tokens = min(BURST, self.tokens + (now - self.refilled) * RATE)
            self.refilled = now
            if self.tokens >= n:
                self.tokens -= n
                return
            time.sleep((n - self.tokens) / RATE)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients drop connections on purpose (a segment cut short, a finished run)


Server(("127.0.0.1", PORT), Handler).serve_forever()
