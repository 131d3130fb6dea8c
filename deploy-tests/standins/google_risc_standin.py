#!/usr/bin/env python3
"""A stand-in for Google's RISC management API (risc.googleapis.com/v1beta), for tests only.

Google cannot be reached from a test, so this plays its part over HTTPS under a test CA.
Every request must carry `Authorization: Bearer JWT`, the JWT exactly as Google's
Cross-Account Protection page defines it: header alg RS256 and kid = --key-id (typ absent
or JWT, nothing else); claims exactly iss = sub = --client-email, aud =
https://risc.googleapis.com/google.identity.risc.v1beta.RiscManagementService, iat within 60 s
of now, exp = iat + 3600 (integers); the signature verified with --public-key by the openssl
CLI. Anything else is answered 401 (UNAUTHENTICATED), logged with the check that failed.

The endpoints and their bodies, checked exactly (else 400 INVALID_ARGUMENT):
  POST /v1beta/stream:update         {"delivery": {"delivery_method": PUSH, "url": URL},
                                      "events_requested": [known event-type URIs, at least one]}
                                     a URL not https: 403 (as Google refuses one)
  GET  /v1beta/stream                the configuration held (404 NOT_FOUND before an update),
                                     with events_delivered
  POST /v1beta/stream/status:update  {"status": "enabled" | "disabled"} (404 before an update)
  POST /v1beta/stream:verify         {"state": TEXT} (404 before an update)

A verify, when the stream is enabled and requests the verification type and --verification
is "deliver" (the default; "silent": Google accepts and nothing comes, as when the push
cannot reach the receiver), writes after --verification-delay seconds what the endpoint's
receiver writes when the verification SET arrives: the hash
`<--key-prefix>:google:verification:<state>` (received_at and event_time in ms, jti,
client_id = --verification-client-id), expiring after 7 days, into the redis-server on
127.0.0.1:--redis-port. It stands for the push and the receiver together until both run in
one test; it is logged as {"endpoint": "verification_set", "state": ...}.

--answers FILE: {"stream:update" | "stream" | "status:update" | "stream:verify":
[{"status": 403, "message": "...", "retry_after": "1"}, ...]}: the first requests to that
endpoint (after the JWT check) are answered so, in order; then as above. Every request is
logged to --log as one JSON line (endpoint, method, status, the JWT's header and claims, the
body as parsed, the problem when refused). Prints "listening PORT" once it accepts
connections. Standard library only (plus the openssl CLI).
"""

import argparse
import base64
import binascii
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

AUDIENCE = "https://risc.googleapis.com/google.identity.risc.v1beta.RiscManagementService"
PUSH = "https://schemas.openid.net/secevent/risc/delivery-method/push"
RISC = "https://schemas.openid.net/secevent/risc/event-type/"
OAUTH = "https://schemas.openid.net/secevent/oauth/event-type/"
KNOWN_EVENTS = {RISC + name for name in ("sessions-revoked", "account-disabled", "account-enabled",
                                         "account-credential-change-required", "verification")} | \
               {OAUTH + name for name in ("tokens-revoked", "token-revoked")}
PATHS = {
    ("POST", "/v1beta/stream:update"): "stream:update",
    ("GET", "/v1beta/stream"): "stream",
    ("POST", "/v1beta/stream/status:update"): "status:update",
    ("POST", "/v1beta/stream:verify"): "stream:verify",
}
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def b64url_decode(text: str) -> bytes:
    if not text or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_rs256(public_key_path: str, message: bytes, signature: bytes) -> bool:
    with tempfile.TemporaryDirectory() as work:
        message_path = os.path.join(work, "message")
        signature_path = os.path.join(work, "signature")
        with open(message_path, "wb") as f:
            f.write(message)
        with open(signature_path, "wb") as f:
            f.write(signature)
        result = subprocess.run(["openssl", "dgst", "-sha256", "-verify", public_key_path, "-signature",
                                 signature_path, message_path], capture_output=True, timeout=10)
        return result.returncode == 0


def redis_command(port: int, *arguments: str) -> bytes:
    """One command over RESP to 127.0.0.1:port; the raw reply."""
    request = b"*%d\r\n" % len(arguments)
    for argument in arguments:
        data = argument.encode()
        request += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(request)
        return connection.recv(4096)


class Standin:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.answers = {}
        if args.answers:
            with open(args.answers) as f:
                self.answers = json.load(f)
        self.configuration = None
        self.status = "enabled"

    def log(self, entry: dict) -> None:
        with self.lock:
            with open(self.args.log, "a") as f:
                f.write(json.dumps(entry, sort_keys=True) + "\n")

    def next_answer(self, endpoint: str):
        with self.lock:
            queue = self.answers.get(endpoint) or []
            return queue.pop(0) if queue else None

    def token_problem(self, authorization):
        """The decoded header and claims, and the first way the token differs from Google's rules (or None)."""
        if not authorization or not authorization.startswith("Bearer "):
            return None, None, "no_bearer"
        parts = authorization[len("Bearer "):].split(".")
        if len(parts) != 3:
            return None, None, "token_shape"
        try:
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            signature = b64url_decode(parts[2])
        except (ValueError, binascii.Error):
            return None, None, "token_encoding"
        if not isinstance(header, dict) or not isinstance(claims, dict):
            return header, claims, "token_shape"
        if header.get("alg") != "RS256" or header.get("kid") != self.args.key_id or \
                header.get("typ", "JWT") != "JWT" or set(header) - {"alg", "kid", "typ"}:
            return header, claims, "header"
        if set(claims) != {"iss", "sub", "aud", "iat", "exp"}:
            return header, claims, "claim_names"
        if claims["iss"] != self.args.client_email or claims["sub"] != self.args.client_email:
            return header, claims, "iss_sub"
        if claims["aud"] != AUDIENCE:
            return header, claims, "aud"
        iat, exp = claims["iat"], claims["exp"]
        if type(iat) is not int or type(exp) is not int:
            return header, claims, "times_not_integers"
        if abs(iat - time.time()) > 60:
            return header, claims, "iat"
        if exp != iat + 3600:
            return header, claims, "exp"
        if not verify_rs256(self.args.public_key, (parts[0] + "." + parts[1]).encode(), signature):
            return header, claims, "signature"
        return header, claims, None

    def deliver_verification(self, state: str) -> None:
        time.sleep(self.args.verification_delay)
        now = int(time.time() * 1000)
        key = f"{self.args.key_prefix}:google:verification:{state}"
        redis_command(self.args.redis_port, "HSET", key, "received_at", str(now), "jti", str(uuid.uuid4()),
                      "client_id", self.args.verification_client_id, "event_time", str(now - 50))
        redis_command(self.args.redis_port, "PEXPIRE", key, str(7 * 86400 * 1000))
        self.log({"endpoint": "verification_set", "state": state})


def make_handler(standin: Standin):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):  # the request log below is the only log
            pass

        def answer(self, status: int, body: dict, retry_after: str = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def error(self, status: int, message: str, retry_after: str = None) -> None:
            self.answer(status, {"error": {"code": status, "message": message,
                                           "status": GOOGLE_STATUS.get(status, "UNKNOWN")}}, retry_after)

        def do_GET(self):
            self.handle_request("GET")

        def do_POST(self):
            self.handle_request("POST")

        def handle_request(self, method: str):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length) if length else b""
            endpoint = PATHS.get((method, self.path))
            entry = {"endpoint": endpoint or self.path, "method": method}
            if endpoint is None:
                entry["status"] = 404
                standin.log(entry)
                return self.error(404, "no such method")
            header, claims, problem = standin.token_problem(self.headers.get("Authorization"))
            entry["header"], entry["claims"] = header, claims
            if problem is not None:
                entry.update(status=401, problem=problem)
                standin.log(entry)
                return self.error(401, "Request had invalid authentication credentials.")
            body = None
            if method == "POST":
                if self.headers.get("Content-Type") != "application/json":
                    entry.update(status=400, problem="content_type")
                    standin.log(entry)
                    return self.error(400, "the body must be JSON")
                try:
                    body = json.loads(raw)
                except ValueError:
                    entry.update(status=400, problem="body_not_json")
                    standin.log(entry)
                    return self.error(400, "the body must be JSON")
                entry["body"] = body
            scripted = standin.next_answer(endpoint)
            if scripted is not None:
                entry.update(status=scripted["status"], scripted=True)
                standin.log(entry)
                return self.error(scripted["status"], scripted.get("message", "scripted"), scripted.get("retry_after"))
            status, reply, problem = self.serve(endpoint, body)
            entry["status"] = status
            if problem:
                entry["problem"] = problem
            standin.log(entry)
            if status == 200:
                return self.answer(200, reply)
            return self.error(status, reply)

        def serve(self, endpoint: str, body):
            """(status, reply body or error message, problem)."""
            if endpoint == "stream:update":
                if not isinstance(body, dict) or set(body) != {"delivery", "events_requested"}:
                    return 400, "delivery and events_requested are required", "fields"
                delivery, events = body["delivery"], body["events_requested"]
                if not isinstance(delivery, dict) or set(delivery) != {"delivery_method", "url"} or \
                        delivery["delivery_method"] != PUSH or not isinstance(delivery["url"], str):
                    return 400, "delivery must be push with a url", "delivery"
                if not isinstance(events, list) or not events or any(e not in KNOWN_EVENTS for e in events):
                    return 400, "events_requested holds an unknown event type", "events"
                if not delivery["url"].startswith("https://"):
                    return 403, "The receiver URL must use HTTPS.", "url_not_https"
                with standin.lock:
                    standin.configuration = {"delivery": delivery, "events_requested": events}
                return 200, {}, None
            with standin.lock:
                configuration, status = standin.configuration, standin.status
            if configuration is None:
                return 404, "Stream configuration not found.", "not_configured"
            if endpoint == "stream":
                return 200, dict(configuration, events_delivered=configuration["events_requested"]), None
            if endpoint == "status:update":
                if not isinstance(body, dict) or set(body) != {"status"} or body["status"] not in ("enabled",
                                                                                                  "disabled"):
                    return 400, "status must be enabled or disabled", "status"
                with standin.lock:
                    standin.status = body["status"]
                return 200, {}, None
            # stream:verify
            if not isinstance(body, dict) or set(body) != {"state"} or not isinstance(body["state"], str):
                return 400, "state must be a string", "state"
            if status == "enabled" and RISC + "verification" in configuration["events_requested"] and \
                    standin.args.verification == "deliver":
                threading.Thread(target=standin.deliver_verification, args=(body["state"],), daemon=True).start()
            return 200, {}, None

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--public-key", required=True)
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--client-email", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--answers")
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--key-prefix", default="siwa")
    parser.add_argument("--verification", choices=("deliver", "silent"), default="deliver")
    parser.add_argument("--verification-delay", type=float, default=0.3)
    parser.add_argument("--verification-client-id", default="123-test.apps.googleusercontent.com")
    args = parser.parse_args()
    standin = Standin(args)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(standin))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
