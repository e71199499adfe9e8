#!/usr/bin/env python3
"""A misbehaving HTTP server for the HTTP remote tier's tests (tests/support/http_server.hpp).

fault_server.py MODE PORT LOG [BODY_FILE]
  stall      reads each request and never answers
  status500  answers 500 to every request
  truncate   GET: 200 announcing BODY_FILE's size, sends half of it, closes the connection
  serve      GET: 200 with BODY_FILE; HEAD: 404; PUT: reads the body, 201
  html       GET and HEAD: 200 with an HTML page for every path; PUT and DELETE: 405
  flood      GET: 200 announcing a Content-Length of 3 GB, then BODY_FILE and zeros until the client
             stops reading (at most FLOOD_BYTES)
  flood_chunked  GET: 200 chunked (no Content-Length), BODY_FILE then zeros, as flood
  redis_flood    not HTTP: a Redis server that answers GET and MGET with a bulk string announcing
             3 GB, then zeros as flood; DEL, EVAL and anything else: :1
Writes "METHOD PATH" per request to LOG (the flood modes also "sent N" once the client stopped reading:
the bytes written, body only), and "ready" to stdout once it listens on 127.0.0.1:PORT.
"""
import http.server
import socketserver
import sys
import time

MODE, PORT, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3]
BODY = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else b""
HTML = b"<!DOCTYPE html><html><head><title>Welcome</title></head><body>It works!</body></html>\n"
FLOOD_BYTES = 300 * 1024 * 1024  # past the remote cap (64 MiB), short of the old 1 GiB one: a reader
ANNOUNCED = 3 * 1024 * 1024 * 1024  # that does not stop early reads it all


def note(line):
    with open(LOG, "a") as log:
        log.write(line + "\n")


def flood(write, chunked=False):
    """Writes BODY, then zeros, until the peer stops reading or FLOOD_BYTES are out; notes the count."""
    sent = 0
    block = bytes(64 * 1024)
    try:
        pieces = [BODY] if BODY else []
        while sent < FLOOD_BYTES:
            piece = pieces.pop() if pieces else block
            write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
    except OSError:
        pass
    note(f"sent {sent}")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        note(f"{self.command} {self.path}")

    def handle_any(self):
        self.note()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if MODE == "stall":
            time.sleep(3600)
            return
        if MODE == "status500" or (MODE == "put500" and self.command == "PUT"):  # put500: nginx with a read-only root
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
        if MODE == "html":
            ok = self.command in ("GET", "HEAD")
            self.send_response(200 if ok else 405)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(HTML) if ok else 0))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(HTML)
            return
        if MODE in ("flood", "flood_chunked") and self.command == "GET":
            self.send_response(200)
            if MODE == "flood":
                self.send_header("Content-Length", str(ANNOUNCED))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            flood(self.wfile.write, chunked=MODE == "flood_chunked")
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


class RedisHandler(socketserver.StreamRequestHandler):
    """Just enough RESP for a lookup: reads each command (an array of bulk strings) and answers it."""

    def handle(self):
        while True:
            header = self.rfile.readline()
            if not header.startswith(b"*"):
                return
            args = []
            for _ in range(int(header[1:])):
                length = int(self.rfile.readline()[1:])
                args.append(self.rfile.read(length + 2)[:-2])
            name = args[0].upper().decode() if args else ""
            note(" ".join([name] + [a.decode(errors="replace") for a in args[1:2]]))
            if name in ("GET", "MGET"):
                if name == "MGET":
                    self.wfile.write(b"*2\r\n")
                self.wfile.write(b"$%d\r\n" % ANNOUNCED)
                self.wfile.flush()
                flood(self.wfile.write)
                return
            self.wfile.write(b":1\r\n")
            self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class RedisServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


server = RedisServer(("127.0.0.1", PORT), RedisHandler) if MODE == "redis_flood" else Server(("127.0.0.1", PORT), Handler)
print("ready", flush=True)
server.serve_forever()
