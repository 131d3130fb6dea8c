#!/usr/bin/env python3
"""A siwa-endpoint webhook receiver: verify, dedupe on webhook-id, apply by event_time, then 2xx.

consent-revoked and account-deleted end the user's sessions (the rows of `sessions` that
began at or before the event); account-deleted also starts the account's deletion (a row of
`account_deletions` for your deletion job). The webhook-id and the effect are written in one
SQLite transaction, committed before the answer: a 2xx means it is stored, and a retry or a
replay of the same webhook-id changes nothing. docs/webhooks.md explains each step.

    pip install -r requirements.txt
    python3 receiver.py --listen 127.0.0.1:8080 --keys-file /etc/myapp/siwa-webhook.keys \
        --store /var/lib/myapp/siwa.sqlite

The keys file holds one key a line: `whsec_...` (the destination's shared secret: `v1`
signatures) or `whpk_...` (its public key, printed by `siwa-endpoint deliver keygen`: `v1a`),
two during a rotation. Run it behind your HTTPS server; it listens on loopback.

The reference `standardwebhooks` package verifies `v1` (and the timestamp); it has no
ed25519, so `v1a` is verified here with `cryptography`.
"""

import argparse
import base64
import binascii
import json
import sqlite3
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import standardwebhooks
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TOLERANCE_SECONDS = 300  # the spec's 5 minutes, either way
MAX_BODY_BYTES = 65536  # siwa-endpoint's bodies are well under 1 kB
DRAIN_LIMIT_BYTES = 1 << 20  # a larger body is read and dropped, so the client gets the 413, not a reset
REVOKING = ("consent-revoked", "account-deleted")
EMAIL = ("email-disabled", "email-enabled")
# Google's events (data.provider "google", sent only to a destination whose types name them):
# these end the Google user's sessions, as account-disabled does for hijacking.
GOOGLE_ENDING = ("sessions-revoked", "tokens-revoked")

TABLES = """
CREATE TABLE IF NOT EXISTS deliveries (webhook_id TEXT PRIMARY KEY, received_at INTEGER NOT NULL, outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (client_id TEXT NOT NULL, sub TEXT NOT NULL, sessions_revoked_at INTEGER,
    email_forwarding TEXT, email_forwarding_at INTEGER, email TEXT, is_private_email INTEGER, PRIMARY KEY (client_id, sub));
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, client_id TEXT NOT NULL, sub TEXT NOT NULL, started_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS account_deletions (client_id TEXT NOT NULL, sub TEXT NOT NULL, requested_at INTEGER NOT NULL,
    webhook_id TEXT NOT NULL, PRIMARY KEY (client_id, sub));
"""


class Refused(Exception):
    def __init__(self, status: int, outcome: str):
        super().__init__(outcome)
        self.status, self.outcome = status, outcome


def read_keys(path: str) -> list:
    keys = []
    for line in open(path, encoding="utf-8").read().split():
        if line.startswith("whsec_"):
            keys.append(standardwebhooks.Webhook(line))
        elif line.startswith("whpk_"):
            keys.append(Ed25519PublicKey.from_public_bytes(base64.b64decode(line[len("whpk_"):], validate=True)))
        else:
            raise SystemExit(f"{path}: a key is whsec_... or whpk_... (never the whsk_ secret key)")
    if not keys:
        raise SystemExit(f"{path}: no key")
    return keys


def verify(keys: list, headers, body: bytes) -> str:
    """The webhook-id, once one signature of the header verifies under one key (any of
    several passes: a rotation sends old and new) and the timestamp is within 5 minutes."""
    webhook_id, timestamp, signatures = (headers.get(name) for name in
                                         ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (webhook_id and timestamp and signatures):
        raise Refused(401, "headers_missing")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
        raise Refused(401, "timestamp_out_of_tolerance")
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    for key in keys:
        if isinstance(key, standardwebhooks.Webhook):  # v1: HMAC-SHA256, compared in constant time
            try:
                key.verify(body, {"webhook-id": webhook_id, "webhook-timestamp": timestamp,
                                  "webhook-signature": signatures}, json_parse=False)
                return webhook_id
            except standardwebhooks.WebhookVerificationError:
                continue
        for signature in signatures.split(" "):  # v1a: ed25519
            version, _, value = signature.partition(",")
            if version != "v1a":
                continue
            try:
                key.verify(base64.b64decode(value, validate=True), signed)
                return webhook_id
            except (InvalidSignature, binascii.Error, ValueError):
                continue
    raise Refused(401, "signature_invalid")


def event_of(body: bytes) -> dict:
    try:
        event = json.loads(body)
        data = event["data"]
        valid = (event["version"] == 1 and isinstance(data["client_id"], str) and isinstance(data["sub"], str)
                 and isinstance(data["event_type"], str) and type(data["event_time"]) is int)
    except (ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        raise Refused(400, "body_invalid")
    return data


def apply(db: sqlite3.Connection, webhook_id: str, data: dict) -> str:
    """One transaction: the webhook-id and its effect are committed together, or neither."""
    with db:
        if db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?, '')",
                      (webhook_id, int(time.time() * 1000))).rowcount == 0:
            return "duplicate"
        outcome = apply_event(db, webhook_id, data)
        db.execute("UPDATE deliveries SET outcome = ? WHERE webhook_id = ?", (outcome, webhook_id))
        return outcome


def ends_sessions(data: dict) -> bool:
    """Apple's bodies carry no provider. Google's client IDs never equal Apple's, so a Google
    user's rows sit in the same tables under their own (client_id, sub)."""
    provider, kind = data.get("provider", "apple"), data["event_type"]
    if provider == "apple":
        return kind in REVOKING
    return provider == "google" and data["sub"] != "" and (
        kind in GOOGLE_ENDING or (kind == "account-disabled" and data.get("reason") == "hijacking"))


def apply_event(db: sqlite3.Connection, webhook_id: str, data: dict) -> str:
    """Events of one user may arrive out of order (retries): each clock only moves forward,
    so an event older than the one applied changes nothing ("stale")."""
    kind, at, user = data["event_type"], data["event_time"], (data["client_id"], data["sub"])
    db.execute("INSERT OR IGNORE INTO users (client_id, sub) VALUES (?, ?)", user)
    revoked_at, forwarding_at = db.execute(
        "SELECT sessions_revoked_at, email_forwarding_at FROM users WHERE client_id = ? AND sub = ?", user).fetchone()
    deleting = db.execute("SELECT 1 FROM account_deletions WHERE client_id = ? AND sub = ?", user).fetchone()
    outcome = "stale"
    apple, ending = data.get("provider", "apple") == "apple", ends_sessions(data)
    if ending and (revoked_at is None or at > revoked_at):
        db.execute("UPDATE users SET sessions_revoked_at = ? WHERE client_id = ? AND sub = ?", (at, *user))
        # Sessions begun after the event (the user signed in again) stay.
        db.execute("DELETE FROM sessions WHERE client_id = ? AND sub = ? AND started_at <= ?", (*user, at))
        outcome = "applied"
    if apple and kind == "account-deleted":
        # A deletion to carry out even when older than a revocation already applied.
        db.execute("INSERT OR IGNORE INTO account_deletions VALUES (?, ?, ?, ?)", (*user, at, webhook_id))
        db.execute("UPDATE users SET email = NULL, is_private_email = NULL, email_forwarding = 'disabled' "
                   "WHERE client_id = ? AND sub = ?", user)
        outcome = "applied"
    elif apple and kind in EMAIL and not deleting and (forwarding_at is None or at > forwarding_at):
        db.execute("UPDATE users SET email_forwarding = ?, email_forwarding_at = ?, email = coalesce(?, email), "
                   "is_private_email = coalesce(?, is_private_email) WHERE client_id = ? AND sub = ?",
                   (kind.removeprefix("email-"), at, data.get("email"), data.get("is_private_email"), *user))
        outcome = "applied"
    elif not ending and not (apple and kind in EMAIL):
        outcome = "ignored"  # unknown, test, or a Google event that ends nothing: recorded, nothing to change
    return outcome


def make_handler(keys: list, db: sqlite3.Connection):
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                length = int(self.headers.get("content-length", ""))
            except ValueError:
                return self.answer(411, "length_required")
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True
                if length <= DRAIN_LIMIT_BYTES:
                    self.rfile.read(length)
                return self.answer(413, "body_too_large")
            body = self.rfile.read(length)
            try:
                webhook_id = verify(keys, self.headers, body)
                outcome = apply(db, webhook_id, event_of(body))
            except Refused as refusal:
                return self.answer(refusal.status, refusal.outcome)
            except sqlite3.Error:
                return self.answer(500, "store_failed")  # not stored: siwa-endpoint retries
            self.answer(200, outcome)

        def answer(self, status: int, outcome: str):
            reply = json.dumps({"outcome": outcome}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
            # One line, no body and no address: the webhook-id says which delivery.
            print(json.dumps({"webhook_id": self.headers.get("webhook-id"), "status": status, "outcome": outcome}),
                  file=sys.stderr, flush=True)

        def log_message(self, *args):
            pass  # answer() logs

    return Receiver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8080", help="host:port (port 0: any free one)")
    parser.add_argument("--keys-file", required=True)
    parser.add_argument("--store", required=True, help="the SQLite database")
    args = parser.parse_args()

    db = sqlite3.connect(args.store)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")  # committed means on disk before the 2xx
    db.executescript(TABLES)
    host, port = args.listen.rsplit(":", 1)
    server = HTTPServer((host, int(port)), make_handler(read_keys(args.keys_file), db))
    print(f"listening on {host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
