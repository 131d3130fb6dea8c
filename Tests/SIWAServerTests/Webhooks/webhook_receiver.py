"""A webhook receiver for the deliverer's tests: HTTPS on loopback, each request verified with
the reference Standard Webhooks library (`standardwebhooks`, v1 HMAC) or, for v1a (ed25519,
which that library lacks), with `cryptography`; and the same request with one body byte changed,
which must be refused. Each request is one JSON line in the log file. How to answer is read from
the plan file on every request: {"default": {...}, "by_id": {"<webhook-id>": [{...}, ...]}}, the
n-th request of an ID taking the n-th answer (the last one after that). An answer: status,
retry_after, location, hang (seconds before answering), close (drop the connection after a
partial status line), body_bytes. Each record names the TCP connection it came on ("connection",
numbered from 1); each connection's opening and closing is one line ("open N", "closed N") of
LOG.connections.

usage: webhook_receiver.py PORT CERT KEY LOG PLAN KEYS   (KEYS: {"hmac": [...], "ed25519": [...]})
"""
import base64, http.server, json, socket, ssl, sys, threading, time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

port, cert, key, log_path, plan_path, keys_path = sys.argv[1:7]
keys = json.load(open(keys_path))
counts, lock = {}, threading.Lock()
connections = [0]


def connection_event(text):
    with lock, open(log_path + ".connections", "a") as events:
        events.write(text + "\n")


def verify_hmac(body, headers):
    if not keys.get("hmac"):
        return None
    for secret in keys["hmac"]:
        try:
            Webhook(secret).verify(body, headers)
            return True
        except WebhookVerificationError:
            pass
    return False


def verify_ed25519(body, headers):
    if not keys.get("ed25519"):
        return None
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    if abs(time.time() - int(headers["webhook-timestamp"])) > 300:
        return False
    for public in keys["ed25519"]:
        verifier = Ed25519PublicKey.from_public_bytes(base64.b64decode(public[len("whpk_"):]))
        for signature in headers["webhook-signature"].split(" "):
            scheme, _, value = signature.partition(",")
            if scheme != "v1a":
                continue
            try:
                verifier.verify(base64.b64decode(value), content)
                return True
            except Exception:
                pass
    return False


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with lock:
            connections[0] += 1
            self.connection_number = connections[0]
        connection_event(f"open {self.connection_number}")

    def finish(self):
        try:
            super().finish()
        finally:
            connection_event(f"closed {self.connection_number}")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        headers = {name: self.headers.get(name, "") for name in
                   ("webhook-id", "webhook-timestamp", "webhook-signature", "content-type", "user-agent")}
        tampered = bytearray(body)
        tampered[len(tampered) // 2] ^= 0x01
        with lock:
            number = counts.get(headers["webhook-id"], 0)
            counts[headers["webhook-id"]] = number + 1
        plan = json.load(open(plan_path))
        answers = plan.get("by_id", {}).get(headers["webhook-id"])
        answer = (answers[min(number, len(answers) - 1)] if answers else None) or plan.get("default", {"status": 200})
        record = {
            "id": headers["webhook-id"], "timestamp": headers["webhook-timestamp"],
            "signature": headers["webhook-signature"], "content_type": headers["content-type"],
            "user_agent": headers["user-agent"], "path": self.path, "body": body.decode(),
            "v1": verify_hmac(body, headers), "v1a": verify_ed25519(body, headers),
            "tampered_v1": verify_hmac(bytes(tampered), headers), "tampered_v1a": verify_ed25519(bytes(tampered), headers),
            "received_ms": int(time.time() * 1000), "answer": answer, "connection": self.connection_number,
        }
        with lock, open(log_path, "a") as log:
            log.write(json.dumps(record) + "\n")
        if answer.get("hang"):
            time.sleep(answer["hang"])
        if answer.get("close"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        payload = b"x" * answer.get("body_bytes", 0)
        self.send_response(answer.get("status", 200))
        if "retry_after" in answer:
            self.send_header("Retry-After", answer["retry_after"])
        if "location" in answer:
            self.send_header("Location", answer["location"])
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *arguments):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
