#!/usr/bin/env python3
"""A misbehaving HTTP server for the HTTP remote tier's tests (tests/support/http_server.hpp).

fault_server.py MODE PORT LOG [BODY_FILE]
  stall      reads each request and never answers
  status500  answers 500 to every request
  truncate   GET: 200 announcing BODY_FILE's size, sends half of it, closes the connection
  serve      GET: 200 with BODY_FILE; HEAD: 404; PUT: reads the body, 201
Writes "METHOD PATH" per request to LOG, and "ready" to stdout once it listens on 127.0.0.1:PORT.
"""
import http.server
import socketserver
import sys
import time

MODE, PORT, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3]
BODY = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else b""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        with open(LOG, "a") as log:
            log.write(f"{self.command} {self.path}\n")

    def handle_any(self):
        self.note()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if MODE == "stall":
            time.sleep(3600)
            return
        if MODE == "status500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if MODE == "truncate" and self.command == "GET":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[: len(BODY) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if MODE == "serve" and self.command == "GET":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)
            return
        status = {"PUT": 201, "DELETE": 204}.get(self.command, 404)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_PUT = do_DELETE = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", PORT), Handler)
print("ready", flush=True)
server.serve_forever()
