#!/usr/bin/env python3
"""A stand-in for Apple's token endpoints (POST /auth/token, /auth/revoke), for tests only.

Apple cannot be reached from a test, so this plays its part over HTTPS under a test
CA. It checks the client secret exactly as Apple defines it (a JWT signed ES256 with
the team's key: header alg ES256 and kid only; claims iss = team ID, iat, exp at
most 15777000 s after iat, aud https://appleid.apple.com, sub = client ID; the raw
64-byte r||s signature verified with the key's public part by the openssl CLI) and
answers per refresh token, as the --tokens file says:

    {"<refresh token>": {"label": "a", "answer": "valid" | "refused" | "error500"
                         | "error500_once" | "stall" | "throttle"}}

("throttle": every request is answered 429 with `Retry-After: --retry-after-seconds`.)

A token not in the file is refused (invalid_grant); a wrong client secret or client
ID is answered 400 invalid_client.

/auth/revoke checks the client secret the same way, and the form exactly as Apple
defines it (client_id, client_secret, token, token_type_hint refresh_token or
access_token, nothing else: else 400 invalid_request); per token, "valid" is answered
200 with an empty body (revoked), "refused" 400 invalid_grant, the others as above.

Like Apple after a revocation (TN3194), it can then post a signed consent-revoked for
the token's user to the endpoint: a token entry with "notify_after": SECONDS and "sub"
makes it, that long after answering 200, sign one with --sign-command (the test kit's
`siwa-endpoint sign ...`, to which --type, --sub and --client-id are added) and POST it
to --notify-url over HTTPS (trusting --notify-ca); without "notify_after" it stays
silent, as Apple does when the registration is wrong. Each post is logged
({"endpoint": "notify", "label", "status"}). Every request is logged to --log as one JSON
line with the token's label (never the token), the answer, and for invalid_client
the check that failed.

For an app transfer (TN3159), /auth/token also grants grant_type=client_credentials with
scope=user.migration (exactly grant_type, scope, client_id, client_secret) to the sending
team (--team-id, --key-id, --public-key) and to the recipient team (--recipient-team-id,
--recipient-key-id, --recipient-public-key): an access token of that team, expires_in
--access-token-seconds (3600), refused with invalid_grant once expired or after
--access-token-uses uses. /auth/usermigrationinfo checks, as Apple does, the bearer
token (unknown, expired or used up: 400 invalid_grant), the client secret (400
invalid_client; a token of another team too), and the form: the sending team sends
exactly sub, target (the recipient's team ID), client_id, client_secret; the recipient
exactly transfer_sub, client_id, client_secret (else 400 invalid_request). Per user, as
the --migration file says:

    {"export": {"<sub>": {"label": "a", "transfer_sub": "...", "answer": "ok"}},
     "import": {"<transfer_sub>": {"label": "a", "sub": "...", "email": "...",
                                  "is_private_email": true, "answer": "ok"}}}

answer "ok", "invalid_request" (a user who cannot be migrated), "error429_once",
"error500", "stall_once" (the first request waits --stall-seconds, 30 by default, then
answers 500), "throttle_once" (the first request is answered 429 with `Retry-After:
--retry-after-seconds`; until that time has passed, every request to either endpoint is
answered 429 again and logged with "early": "true", as Apple's limiter would),
"unavailable_once" (the same with 503 and its Retry-After); a user not
in the file is invalid_request. With --transfer-completed-file, the recipient's requests
are answered 400 invalid_request (logged "not_yet") while that file does not exist: the
transfer has not completed. A target in --other-team-ids (a real team, not the recipient)
is answered too, with the entry's transfer_sub + "-" + the team ID in lower case: the
identifier for that team. Each migration request's log line has "at", the stand-in's
clock (seconds, as text). Prints "listening PORT" once it accepts connections.
Standard library only (plus the openssl CLI), so it needs no extra package.
"""

import argparse
import base64
import binascii
import http.client
import http.server
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

AUDIENCE = "https://appleid.apple.com"
MAX_LIFETIME = 15_777_000


def b64url_decode(text: str) -> bytes:
    if not text or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def der_integer(value: bytes) -> bytes:
    value = value.lstrip(b"\x00") or b"\x00"
    if value[0] & 0x80:
        value = b"\x00" + value
    return b"\x02" + bytes([len(value)]) + value


def raw_to_der(raw: bytes) -> bytes:
    body = der_integer(raw[:32]) + der_integer(raw[32:])
    return b"\x30" + bytes([len(body)]) + body


def verify_es256(public_key_path: str, message: bytes, raw_signature: bytes) -> bool:
    if len(raw_signature) != 64:
        return False
    with tempfile.TemporaryDirectory() as work:
        message_path = os.path.join(work, "message")
        signature_path = os.path.join(work, "signature")
        with open(message_path, "wb") as f:
            f.write(message)
        with open(signature_path, "wb") as f:
            f.write(raw_to_der(raw_signature))
        result = subprocess.run(["openssl", "dgst", "-sha256", "-verify", public_key_path, "-signature",
                                 signature_path, message_path], capture_output=True, timeout=10)
        return result.returncode == 0


class Standin:
    def __init__(self, args):
        self.args = args
        with open(args.tokens) as f:
            self.tokens = json.load(f)
        self.client_ids = set(args.client_ids.split(","))
        self.seen = {}
        self.lock = threading.Lock()
        self.migration = {"export": {}, "import": {}}
        if args.migration:
            with open(args.migration) as f:
                self.migration.update(json.load(f))
        # team ID -> (key ID, public key file)
        self.teams = {args.team_id: (args.key_id, args.public_key)}
        if args.recipient_team_id:
            self.teams[args.recipient_team_id] = (args.recipient_key_id, args.recipient_public_key)
        self.access_tokens = {}  # token -> {"team", "expires", "uses"}
        self.hold_until = 0.0  # a throttle_once answer's Retry-After, as time.time()
        self.other_teams = set(filter(None, (args.other_team_ids or "").split(",")))

    def early(self):
        """Seconds left of a Retry-After this stand-in asked for, or None when none is running."""
        with self.lock:
            left = self.hold_until - time.time()
        return left if left > 0 else None

    def log(self, entry: dict) -> None:
        with self.lock:
            with open(self.args.log, "a") as f:
                f.write(json.dumps(entry, sort_keys=True) + "\n")

    def notify(self, entry: dict, client_id: str) -> None:
        """Apple's consent-revoked after a revocation: signed, posted to the endpoint."""
        time.sleep(float(entry["notify_after"]))
        body = subprocess.run(json.loads(self.args.sign_command) + ["--type", "consent-revoked", "--sub", entry["sub"],
                                                                    "--client-id", client_id],
                              capture_output=True, check=True, timeout=30).stdout.strip()
        url = urllib.parse.urlsplit(self.args.notify_url)
        context = ssl.create_default_context(cafile=self.args.notify_ca)
        connection = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=10)
        try:
            connection.request("POST", url.path, body=body, headers={"Content-Type": "application/json"})
            status = connection.getresponse().status
        except OSError as error:
            status = f"failed: {error}"
        finally:
            connection.close()
        self.log({"label": entry["label"], "endpoint": "notify", "status": status})

    def client_problem(self, form: dict, revoke: bool = False, team_id: str = None):
        """The first way the request's client authentication differs from Apple's rules, or None.
        With team_id, the secret must be that team's (one of the transfer's two teams)."""
        if not revoke and form.get("grant_type") != "refresh_token":
            return "grant_type"
        key_id, public_key = self.teams.get(team_id or self.args.team_id, (None, None))
        if key_id is None:
            return "team"
        client_id = form.get("client_id")
        if client_id not in self.client_ids:
            return "client_id"
        parts = form.get("client_secret", "").split(".")
        if len(parts) != 3:
            return "secret_shape"
        try:
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            signature = b64url_decode(parts[2])
        except (ValueError, binascii.Error):
            return "secret_encoding"
        if header != {"alg": "ES256", "kid": key_id}:
            return "header"
        if set(claims) != {"iss", "iat", "exp", "aud", "sub"}:
            return "claim_names"
        if claims["iss"] != (team_id or self.args.team_id):
            return "iss"
        if claims["aud"] != AUDIENCE:
            return "aud"
        if claims["sub"] != client_id:
            return "sub"
        iat, exp = claims["iat"], claims["exp"]
        if type(iat) is not int or type(exp) is not int:
            return "times_not_integers"
        if abs(iat - time.time()) > 60:
            return "iat"
        if not iat < exp <= iat + MAX_LIFETIME or exp < time.time():
            return "exp"
        if not verify_es256(public_key, (parts[0] + "." + parts[1]).encode(), signature):
            return "signature"
        return None


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
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length).decode()
            if self.path not in ("/auth/token", "/auth/revoke", "/auth/usermigrationinfo") or \
                    self.headers.get("Content-Type") != "application/x-www-form-urlencoded":
                standin.log({"label": None, "answer": "bad_request"})
                return self.answer(400, {"error": "invalid_request"})
            form = dict(urllib.parse.parse_qsl(raw, keep_blank_values=True, strict_parsing=True))
            if self.path == "/auth/revoke":
                return self.revoke(form)
            if self.path == "/auth/usermigrationinfo":
                return self.migration(form)
            if form.get("grant_type") == "client_credentials":
                return self.client_credentials(form)
            problem = standin.client_problem(form)
            entry = standin.tokens.get(form.get("refresh_token"), {"label": "unlisted", "answer": "refused"})
            label, answer = entry["label"], entry["answer"]
            if problem is not None:
                standin.log({"label": label, "answer": "invalid_client", "problem": problem})
                return self.answer(400, {"error": "invalid_client"})
            with standin.lock:
                standin.seen[label] = standin.seen.get(label, 0) + 1
                first = standin.seen[label] == 1
            if answer == "error500_once":
                answer = "error500" if first else "valid"
            standin.log({"label": label, "answer": answer})
            if answer == "throttle":
                return self.answer(429, {"error": "too_many_requests"},
                                   retry_after=str(standin.args.retry_after_seconds))
            if answer == "valid":
                return self.answer(200, {"access_token": "standin-access", "token_type": "Bearer", "expires_in": 3600,
                                         "id_token": "standin-id-token"})
            if answer == "error500":
                return self.answer(500, {"error": "server_error"})
            if answer == "stall":
                time.sleep(30)  # longer than any client timeout the tests set
                return self.answer(200, {"access_token": "too-late"})
            return self.answer(400, {"error": "invalid_grant"})

        def revoke(self, form: dict):
            entry = standin.tokens.get(form.get("token"), {"label": "unlisted", "answer": "refused"})
            label, answer = entry["label"], entry["answer"]
            base = {"label": label, "endpoint": "revoke", "hint": form.get("token_type_hint")}
            if set(form) != {"client_id", "client_secret", "token", "token_type_hint"} or \
                    form["token_type_hint"] not in ("refresh_token", "access_token"):
                standin.log({**base, "answer": "invalid_request", "problem": "form"})
                return self.answer(400, {"error": "invalid_request"})
            problem = standin.client_problem(form, revoke=True)
            if problem is not None:
                standin.log({**base, "answer": "invalid_client", "problem": problem})
                return self.answer(400, {"error": "invalid_client"})
            with standin.lock:
                key = "revoke:" + label
                standin.seen[key] = standin.seen.get(key, 0) + 1
                first = standin.seen[key] == 1
            if answer == "error500_once":
                answer = "error500" if first else "valid"
            standin.log({**base, "answer": answer})
            if answer == "throttle":
                return self.answer(429, {"error": "too_many_requests"},
                                   retry_after=str(standin.args.retry_after_seconds))
            if answer == "valid":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if "notify_after" in entry:
                    threading.Thread(target=standin.notify, args=(entry, form["client_id"]), daemon=True).start()
                return None
            if answer == "error500":
                return self.answer(500, {"error": "server_error"})
            if answer == "stall":
                time.sleep(30)  # longer than any client timeout the tests set
                return self.answer(200, {})
            return self.answer(400, {"error": "invalid_grant"})

        def client_credentials(self, form: dict):
            """The user.migration access token (TN3159)."""
            base = {"endpoint": "token", "grant": "client_credentials", "label": None}
            left = standin.early()
            if left is not None:
                standin.log({**base, "answer": "error429", "early": "true"})
                return self.answer(429, {"error": "too_many_requests"}, retry_after=str(int(left) + 1))
            if set(form) != {"grant_type", "scope", "client_id", "client_secret"} or \
                    form["scope"] != "user.migration":
                standin.log({**base, "answer": "invalid_request", "problem": "form"})
                return self.answer(400, {"error": "invalid_request"})
            team = secret_team(form)
            problem = standin.client_problem({**form, "grant_type": "refresh_token"}, team_id=team)
            if problem is not None:
                standin.log({**base, "answer": "invalid_client", "problem": problem})
                return self.answer(400, {"error": "invalid_client"})
            token = "standin-migration-" + os.urandom(12).hex()
            with standin.lock:
                standin.access_tokens[token] = {"team": team, "uses": 0,
                                                "expires": time.time() + standin.args.access_token_seconds}
            standin.log({**base, "answer": "granted", "team": team})
            return self.answer(200, {"access_token": token, "token_type": "Bearer",
                                     "expires_in": standin.args.access_token_seconds})

        def migration(self, form: dict):
            direction = "export" if "sub" in form or "target" in form else "import"
            base = {"endpoint": "migration", "direction": direction, "label": None, "at": "%.3f" % time.time()}
            left = standin.early()
            if left is not None:
                standin.log({**base, "answer": "error429", "early": "true"})
                return self.answer(429, {"error": "too_many_requests"}, retry_after=str(int(left) + 1))
            authorization = self.headers.get("Authorization", "")
            token = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
            with standin.lock:
                grant = standin.access_tokens.get(token)
                if grant is not None:
                    grant["uses"] += 1
            if grant is None or time.time() >= grant["expires"] or \
                    (standin.args.access_token_uses and grant["uses"] > standin.args.access_token_uses):
                standin.log({**base, "answer": "invalid_grant", "problem": "bearer"})
                return self.answer(400, {"error": "invalid_grant"})
            team = secret_team(form)
            problem = standin.client_problem({**form, "grant_type": "refresh_token"}, team_id=team)
            if problem is None and grant["team"] != team:
                problem = "token_team"
            if problem is not None:
                standin.log({**base, "answer": "invalid_client", "problem": problem})
                return self.answer(400, {"error": "invalid_client"})
            if direction == "export":
                fields_ok = set(form) == {"sub", "target", "client_id", "client_secret"} and \
                    team == standin.args.team_id and \
                    (form["target"] == standin.args.recipient_team_id or form["target"] in standin.other_teams)
                entry = standin.migration["export"].get(form.get("sub"))
            else:
                fields_ok = set(form) == {"transfer_sub", "client_id", "client_secret"} and \
                    team == standin.args.recipient_team_id
                entry = standin.migration["import"].get(form.get("transfer_sub"))
            if not fields_ok:
                standin.log({**base, "answer": "invalid_request", "problem": "form"})
                return self.answer(400, {"error": "invalid_request"})
            completed = standin.args.transfer_completed_file
            if direction == "import" and completed and not os.path.exists(completed):
                standin.log({**base, "label": (entry or {}).get("label", "unlisted"), "answer": "not_yet"})
                return self.answer(400, {"error": "invalid_request"})
            entry = entry or {"label": "unlisted", "answer": "invalid_request"}
            label, answer = entry["label"], entry["answer"]
            with standin.lock:
                key = direction + ":" + label
                standin.seen[key] = standin.seen.get(key, 0) + 1
                first = standin.seen[key] == 1
            if answer.endswith("_once"):
                answer = answer[:-len("_once")] if first else "ok"
            standin.log({**base, "label": label, "answer": answer})
            if answer == "stall":
                time.sleep(standin.args.stall_seconds)  # 30 by default: longer than any client timeout
                return self.answer(500, {"error": "server_error"})
            if answer == "error429":
                return self.answer(429, {"error": "too_many_requests"})
            if answer in ("throttle", "unavailable"):
                with standin.lock:
                    standin.hold_until = time.time() + standin.args.retry_after_seconds
                status = 429 if answer == "throttle" else 503
                return self.answer(status, {"error": "too_many_requests" if status == 429 else "server_error"},
                                   retry_after=str(standin.args.retry_after_seconds))
            if answer == "error500":
                return self.answer(500, {"error": "server_error"})
            if answer != "ok":
                return self.answer(400, {"error": answer})
            if direction == "export":
                other = form["target"] if form["target"] != standin.args.recipient_team_id else None
                transfer_sub = entry["transfer_sub"] + ("-" + other.lower() if other else "")
                return self.answer(200, {"transfer_sub": transfer_sub})
            body = {"sub": entry["sub"]}
            for name in ("email", "is_private_email"):
                if name in entry:
                    body[name] = entry[name]
            return self.answer(200, body)

    def secret_team(form: dict):
        """The team the client secret claims (its iss), checked against that team's key after."""
        try:
            claims = json.loads(b64url_decode(form.get("client_secret", "").split(".")[1]))
            return claims.get("iss") if isinstance(claims, dict) else None
        except (ValueError, IndexError, binascii.Error):
            return None

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--public-key", required=True, help="PEM public key the client secret must verify with")
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--client-ids", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--migration", help="the user migration answers (JSON, see above)")
    parser.add_argument("--recipient-team-id")
    parser.add_argument("--recipient-key-id")
    parser.add_argument("--recipient-public-key")
    parser.add_argument("--access-token-seconds", type=int, default=3600)
    parser.add_argument("--stall-seconds", type=int, default=30, help="how long stall_once waits (migration)")
    parser.add_argument("--access-token-uses", type=int, default=0, help="uses before invalid_grant (0: no limit)")
    parser.add_argument("--retry-after-seconds", type=int, default=2, help="the Retry-After of throttle_once")
    parser.add_argument("--transfer-completed-file", help="the recipient is refused until this file exists")
    parser.add_argument("--other-team-ids", help="teams other than the recipient an export may target")
    parser.add_argument("--notify-url", help="the endpoint's notification URL, for tokens with notify_after")
    parser.add_argument("--notify-ca", help="CA file the endpoint's certificate chains to")
    parser.add_argument("--sign-command", help="JSON list: the command that prints a signed notification body")
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Standin(args)))
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
