"""A TLS receiver for the kept-connection tests: HTTP/1.1 on loopback, answering each POST with
"<connection number> <request number on that connection>", so the client sees how the receiver
saw its requests. Each connection's opening and closing is one line of the events file
("open N", "closed N"; "post N" for each POST on connection N). Paths: /hook answers; /hook-then-close answers, then closes the
connection without saying so (as a server's idle timeout does); /drop closes it without an
answer; /slow-down answers 503 with `Retry-After: 7`, /unavailable 503 without it;
/answer-twice answers, then 0.2 s later writes a second 200 answer ("stray") that no request
asked for (events line "stray N"), as a receiver that answers twice does. GET /switch-certificate makes the same TLS context present the other certificate from
the next handshake on (its session tickets still valid, so a client that resumed a session
would never see the new certificate).

usage: kept_connection_receiver.py PORT CERT KEY OTHER_CERT OTHER_KEY EVENTS
"""
import http.server, ssl, sys, threading, time

port, cert, key, other_cert, other_key, events_path = sys.argv[1:7]
lock = threading.Lock()
opened = [0]
events = open(events_path, "a", buffering=1)


def event(text):
    with lock:
        events.write(text + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with lock:
            opened[0] += 1
            self.number = opened[0]
        self.requests = 0
        event(f"open {self.number}")

    def finish(self):
        try:
            super().finish()
        finally:
            event(f"closed {self.number}")

    def answer(self, body, status=200, retry_after=None):
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.requests += 1
        event(f"post {self.number}")
        if self.path == "/drop":
            self.close_connection = True
            return
        body = f"{self.number} {self.requests}".encode()
        if self.path == "/slow-down":
            self.answer(body, 503, "7")
            return
        if self.path == "/unavailable":
            self.answer(body, 503)
            return
        self.answer(body)
        if self.path == "/answer-twice":
            time.sleep(0.2)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
            event(f"stray {self.number}")
        if self.path == "/hook-then-close":
            self.close_connection = True

    def do_GET(self):
        if self.path == "/switch-certificate":
            context.load_cert_chain(other_cert, other_key)
        self.close_connection = True
        self.answer(b"switched")

    def log_message(self, *arguments):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


server = Server(("127.0.0.1", int(port)), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
