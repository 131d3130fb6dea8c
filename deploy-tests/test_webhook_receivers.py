"""The webhook receivers of examples/webhooks (Python with the reference standardwebhooks
package, Node.js and Ruby with their standard crypto), each started on loopback and sent
deliveries signed by a signer written here from the Standard Webhooks 1.0 text (checked
against the reference package's own signer): a good delivery is applied once and its retry
changes nothing; a changed byte, a timestamp over 5 minutes off or only an unknown key is
refused with 401 and changes nothing; a rotation header passes; an older event_time after a
newer one changes nothing. And the signing vectors (examples/webhooks/signing-vectors.json)
that the deliverer is checked against hold what this signer computes."""

import base64
import contextlib
import datetime
import hashlib
import hmac
import http.client
import json
import os
import select
import sqlite3
import subprocess
import sys
import time
import uuid

import jsonschema
import pytest
import standardwebhooks
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deploy_harness import REPO, free_port, stop_process, wait_until

EXAMPLES = REPO / "examples" / "webhooks"
VECTORS = json.loads((EXAMPLES / "signing-vectors.json").read_text())
SCHEMA = jsonschema.Draft202012Validator(json.loads((REPO / "docs/webhooks/siwa-webhook-v1.schema.json").read_text()))
CLIENT_ID = "com.example.app"


# --- The signer, from the spec: content is "<id>.<timestamp>.<body>" ---------------------


def signed_content(webhook_id: str, timestamp: str, body: bytes) -> bytes:
    return f"{webhook_id}.{timestamp}.".encode() + body


def sign_v1(secret: str, webhook_id: str, timestamp: str, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    digest = hmac.new(key, signed_content(webhook_id, timestamp, body), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def ed25519_secret(secret: str) -> Ed25519PrivateKey:
    """whsk_: the 32-byte seed, or the seed followed by the 32-byte public key."""
    raw = base64.b64decode(secret.removeprefix("whsk_"), validate=True)
    assert len(raw) in (32, 64)
    return Ed25519PrivateKey.from_private_bytes(raw[:32])


def public_of(secret: str) -> str:
    raw = ed25519_secret(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "whpk_" + base64.b64encode(raw).decode()


def sign_v1a(secret: str, webhook_id: str, timestamp: str, body: bytes) -> str:
    return "v1a," + base64.b64encode(ed25519_secret(secret).sign(signed_content(webhook_id, timestamp, body))).decode()


def verifies(public_keys: list, secrets: list, webhook_id: str, timestamp: str, body: bytes, header: str) -> bool:
    """The spec's verifier, without the clock: any signature under any key."""
    content = signed_content(webhook_id, timestamp, body)
    for signature in header.split(" "):
        scheme, _, value = signature.partition(",")
        for secret in secrets if scheme == "v1" else []:
            if hmac.compare_digest(sign_v1(secret, webhook_id, timestamp, body), signature):
                return True
        for public in public_keys if scheme == "v1a" else []:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public.removeprefix("whpk_")))
            with contextlib.suppress(Exception):
                key.verify(base64.b64decode(value, validate=True), content)
                return True
    return False


# --- The vectors ---------------------------------------------------------------------------

KEYS = VECTORS["keys"]


def test_signing_vectors_hold_what_the_spec_and_the_reference_package_compute():
    assert public_of(KEYS["test_fixture_ed25519_secret"]) == KEYS["test_fixture_ed25519_public"]
    assert public_of(KEYS["test_fixture_ed25519_secret_with_public"]) == KEYS["test_fixture_ed25519_public"]
    assert base64.b64decode(KEYS["test_fixture_ed25519_secret_with_public"][5:])[32:] == base64.b64decode(
        KEYS["test_fixture_ed25519_public"][5:])
    assert len(VECTORS["cases"]) == 4 and len(VECTORS["refusals"]) == 4
    for case in VECTORS["cases"]:
        webhook_id, timestamp, body = case["webhook_id"], case["webhook_timestamp"], case["body"].encode()
        assert SCHEMA.is_valid(json.loads(body)) and "." not in webhook_id
        assert case["v1_current"] == sign_v1(KEYS["test_fixture_hmac_current"], webhook_id, timestamp, body)
        assert case["v1_previous"] == sign_v1(KEYS["test_fixture_hmac_previous"], webhook_id, timestamp, body)
        assert case["v1a"] == sign_v1a(KEYS["test_fixture_ed25519_secret"], webhook_id, timestamp, body)
        assert case["webhook_signature_during_rotation"] == f"{case['v1_previous']} {case['v1_current']} {case['v1a']}"
        # The reference package signs the same v1.
        moment = datetime.datetime.fromtimestamp(int(timestamp), datetime.timezone.utc)
        reference = standardwebhooks.Webhook(KEYS["test_fixture_hmac_current"])
        assert reference.sign(webhook_id, moment, body) == case["v1_current"]
        for secrets, publics in (([KEYS["test_fixture_hmac_current"]], []), ([], [KEYS["test_fixture_ed25519_public"]])):
            assert verifies(publics, secrets, webhook_id, timestamp, body, case["webhook_signature_during_rotation"])
    for refusal in VECTORS["refusals"]:
        assert not verifies([KEYS["test_fixture_ed25519_public"]],
                            [KEYS["test_fixture_hmac_current"], KEYS["test_fixture_hmac_previous"]],
                            refusal["webhook_id"], refusal["webhook_timestamp"], refusal["body"].encode(),
                            refusal["webhook_signature"]), refusal["why"]


# --- The receivers ---------------------------------------------------------------------------

HMAC_CURRENT = "whsec_" + base64.b64encode(os.urandom(32)).decode()
HMAC_PREVIOUS = "whsec_" + base64.b64encode(os.urandom(32)).decode()
ED25519 = "whsk_" + base64.b64encode(os.urandom(32)).decode()
ED25519_UNKNOWN = "whsk_" + base64.b64encode(os.urandom(32)).decode()

COMMANDS = {
    "python": [sys.executable, str(EXAMPLES / "python/receiver.py")],
    "node": ["node", str(EXAMPLES / "node/receiver.js")],
    "ruby": ["ruby", str(EXAMPLES / "ruby/receiver.rb")],
}


class Receiver:
    """One receiver process and a reader of its store (SQLite for Python, JSON otherwise)."""

    def __init__(self, language, directory):
        self.language = language
        self.port = free_port()
        self.store = directory / ("store.sqlite" if language == "python" else "store.json")
        self.log = directory / "receiver.log"
        keys = directory / "keys"
        keys.write_text(f"{HMAC_CURRENT}\n{public_of(ED25519)}\n")
        command = [*COMMANDS[language], "--listen", f"127.0.0.1:{self.port}", "--keys-file", str(keys),
                   "--store", str(self.store)]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        ready, _, _ = select.select([self.process.stdout], [], [], 15)
        line = self.process.stdout.readline() if ready else ""
        assert line == f"listening on 127.0.0.1:{self.port}\n", (line, self.log.read_text())

    def post(self, body: bytes, webhook_id: str, signature: str, timestamp: str = None, sign_body: bytes = None):
        """POSTs body; signature names the header: v1, v1a, rotation, previous, unknown."""
        timestamp = timestamp or str(int(time.time()))
        signed = sign_body if sign_body is not None else body
        current, previous = (sign_v1(secret, webhook_id, timestamp, signed) for secret in (HMAC_CURRENT, HMAC_PREVIOUS))
        header = {
            "v1": current,
            "v1a": sign_v1a(ED25519, webhook_id, timestamp, signed),
            "rotation": f"{previous} {current}",
            "previous": previous,
            "unknown": f"{previous} {sign_v1a(ED25519_UNKNOWN, webhook_id, timestamp, signed)}",
        }[signature]
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("POST", "/siwa", body=body, headers={
                "content-type": "application/json", "webhook-id": webhook_id,
                "webhook-timestamp": timestamp, "webhook-signature": header})
            response = connection.getresponse()
            return response.status, json.loads(response.read())["outcome"]
        finally:
            connection.close()

    # The store, read and seeded as the app's other code would.

    def _json(self):
        return json.loads(self.store.read_text()) if self.store.exists() else {
            "deliveries": {}, "users": {}, "sessions": [], "account_deletions": []}

    def add_session(self, label, sub, started_at):
        session_id = f"{label}:{sub}"  # session IDs are unique across users
        if self.language == "python":
            with contextlib.closing(sqlite3.connect(self.store)) as db, db:
                db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (session_id, CLIENT_ID, sub, started_at))
        else:
            state = self._json()
            state["sessions"].append({"session_id": session_id, "client_id": CLIENT_ID, "sub": sub,
                                      "started_at": started_at})
            self.store.with_name("seed.tmp").write_text(json.dumps(state))
            self.store.with_name("seed.tmp").replace(self.store)

    def sessions(self, sub):
        if self.language == "python":
            with contextlib.closing(sqlite3.connect(self.store)) as db:
                rows = db.execute("SELECT session_id FROM sessions WHERE client_id = ? AND sub = ?", (CLIENT_ID, sub))
                return sorted(row[0].split(":")[0] for row in rows)
        return sorted(s["session_id"].split(":")[0] for s in self._json()["sessions"] if s["sub"] == sub)

    def user(self, sub):
        """(sessions_revoked_at, email_forwarding, email_forwarding_at, email), or None."""
        if self.language == "python":
            with contextlib.closing(sqlite3.connect(self.store)) as db:
                return db.execute("SELECT sessions_revoked_at, email_forwarding, email_forwarding_at, email FROM users "
                                  "WHERE client_id = ? AND sub = ?", (CLIENT_ID, sub)).fetchone()
        user = self._json()["users"].get(f"{CLIENT_ID} {sub}")
        if user is None:
            return None
        return tuple(user.get(name) for name in ("sessions_revoked_at", "email_forwarding", "email_forwarding_at", "email"))

    def deletions(self, sub):
        if self.language == "python":
            with contextlib.closing(sqlite3.connect(self.store)) as db:
                rows = db.execute("SELECT requested_at FROM account_deletions WHERE client_id = ? AND sub = ?",
                                  (CLIENT_ID, sub))
                return [row[0] for row in rows]
        return [d["requested_at"] for d in self._json()["account_deletions"] if d["sub"] == sub]

    def delivery(self, webhook_id):
        """The outcome stored with this webhook-id, or None."""
        if self.language == "python":
            with contextlib.closing(sqlite3.connect(self.store)) as db:
                row = db.execute("SELECT outcome FROM deliveries WHERE webhook_id = ?", (webhook_id,)).fetchone()
                return row and row[0]
        entry = self._json()["deliveries"].get(webhook_id)
        return entry and entry["outcome"]


@pytest.fixture(scope="module", params=sorted(COMMANDS))
def receiver(request, tmp_path_factory):
    started = Receiver(request.param, tmp_path_factory.mktemp(f"receiver-{request.param}"))
    yield started
    assert stop_process(started.process, timeout=10) is not None


def body(kind, sub, event_time, raw_type=None, **extra) -> bytes:
    moment = datetime.datetime.fromtimestamp(event_time // 1000, datetime.timezone.utc)
    data = {"client_id": CLIENT_ID, "sub": sub, "event_type": kind, "raw_type": raw_type or kind,
            "event_time": event_time, **extra}
    event = {"type": f"siwa.{kind}", "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{event_time % 1000:03d}Z",
             "version": 1, "data": data}
    assert SCHEMA.is_valid(event)
    return json.dumps(event, separators=(",", ":")).encode()


GOOGLE_URIS = {
    "sessions-revoked": "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked",
    "account-disabled": "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
}


def google_body(kind, sub, event_time, **extra) -> bytes:
    """Google's event as the deliverer sends it (data.provider google, type siwa.google.*)."""
    moment = datetime.datetime.fromtimestamp(event_time // 1000, datetime.timezone.utc)
    data = {"provider": "google", "client_id": CLIENT_ID, "sub": sub, "event_type": kind,
            "raw_type": GOOGLE_URIS[kind], "event_time": event_time, **extra}
    event = {"type": f"siwa.google.{kind}",
             "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{event_time % 1000:03d}Z",
             "version": 1, "data": data}
    assert SCHEMA.is_valid(event)
    return json.dumps(event, separators=(",", ":")).encode()


def new_user():
    return f"001234.{uuid.uuid4().hex}.0123", uuid.uuid4().hex, int(time.time() * 1000) - 60_000


def test_a_good_delivery_is_applied_once_and_its_retry_changes_nothing(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    receiver.add_session("after", sub, at + 1000)
    revoked = body("consent-revoked", sub, at)
    assert receiver.post(revoked, webhook_id, "v1") == (200, "applied")
    assert receiver.sessions(sub) == ["after"]
    assert receiver.user(sub)[0] == at and receiver.delivery(webhook_id) == "applied"
    # An older session appears (as if another node wrote it late): the retry of the same
    # webhook-id, with a new attempt timestamp and the other scheme, must not end it.
    receiver.add_session("late", sub, at - 500)
    assert receiver.post(revoked, webhook_id, "v1a") == (200, "duplicate")
    assert receiver.sessions(sub) == ["after", "late"]


def test_an_ed25519_account_deleted_ends_sessions_and_starts_the_deletion(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    assert receiver.post(body("account-deleted", sub, at, raw_type="account-delete"), webhook_id, "v1a") == (200, "applied")
    assert receiver.sessions(sub) == []
    assert receiver.deletions(sub) == [at]
    assert receiver.user(sub)[:2] == (at, "disabled")


def test_google_events_end_sessions_only_where_google_says_so(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    receiver.add_session("after", sub, at + 1000)
    # Disabled for another reason than hijacking: recorded, no session ended.
    disabled = google_body("account-disabled", sub, at, reason="bulk-account")
    assert receiver.post(disabled, webhook_id, "v1") == (200, "ignored")
    assert receiver.sessions(sub) == ["after", "before"]
    assert receiver.deletions(sub) == []
    revoked_id = uuid.uuid4().hex
    assert receiver.post(google_body("sessions-revoked", sub, at), revoked_id, "v1a") == (200, "applied")
    assert receiver.sessions(sub) == ["after"]
    assert receiver.user(sub)[0] == at and receiver.delivery(revoked_id) == "applied"
    # Hijacking ends sessions too; at the same time as the revocation it changes nothing more.
    receiver.add_session("late", sub, at - 500)
    hijacked = google_body("account-disabled", sub, at, reason="hijacking")
    assert receiver.post(hijacked, uuid.uuid4().hex, "v1") == (200, "stale")
    assert receiver.sessions(sub) == ["after", "late"]
    assert receiver.post(google_body("account-disabled", sub, at + 2000, reason="hijacking"), uuid.uuid4().hex,
                         "v1") == (200, "applied")
    assert receiver.sessions(sub) == []
    assert receiver.deletions(sub) == []


def test_a_changed_byte_is_refused_and_changes_nothing(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    good = body("consent-revoked", sub, at)
    changed = good.replace(str(at).encode(), str(at + 1).encode())
    assert changed != good and len(changed) == len(good)
    assert receiver.post(changed, webhook_id, "rotation", sign_body=good) == (401, "signature_invalid")
    assert receiver.post(changed, webhook_id, "v1a", sign_body=good) == (401, "signature_invalid")
    assert receiver.sessions(sub) == ["before"]
    assert receiver.user(sub) is None and receiver.delivery(webhook_id) is None
    # The refusal did not take the webhook-id: the genuine delivery still applies.
    assert receiver.post(good, webhook_id, "v1") == (200, "applied")
    assert receiver.sessions(sub) == []


def test_a_timestamp_more_than_five_minutes_off_is_refused(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    revoked = body("consent-revoked", sub, at)
    now = int(time.time())
    for off in (-330, 330):
        assert receiver.post(revoked, webhook_id, "v1", timestamp=str(now + off)) == (401, "timestamp_out_of_tolerance")
    assert receiver.sessions(sub) == ["before"] and receiver.delivery(webhook_id) is None
    assert receiver.post(revoked, webhook_id, "v1", timestamp=str(now - 240)) == (200, "applied")
    assert receiver.sessions(sub) == []


def test_a_rotation_header_passes_and_an_unknown_key_alone_is_refused(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    revoked = body("consent-revoked", sub, at)
    for only_unknown_keys in ("previous", "unknown"):
        assert receiver.post(revoked, webhook_id, only_unknown_keys) == (401, "signature_invalid")
    assert receiver.sessions(sub) == ["before"] and receiver.delivery(webhook_id) is None
    assert receiver.post(revoked, webhook_id, "rotation") == (200, "applied")
    assert receiver.sessions(sub) == []


def test_an_older_event_after_a_newer_one_changes_nothing(receiver):
    sub, _, at = new_user()
    newer = body("email-disabled", sub, at, email="abc@privaterelay.appleid.com", is_private_email=True)
    assert receiver.post(newer, uuid.uuid4().hex, "v1") == (200, "applied")
    older = body("email-enabled", sub, at - 5000, email="old@privaterelay.appleid.com", is_private_email=True)
    older_id = uuid.uuid4().hex
    assert receiver.post(older, older_id, "v1a") == (200, "stale")
    assert receiver.user(sub)[1:] == ("disabled", at, "abc@privaterelay.appleid.com")
    assert receiver.delivery(older_id) == "stale"


def test_the_log_has_one_line_per_delivery_and_never_a_body_or_an_address(receiver):
    sub, webhook_id, at = new_user()
    with_address = body("email-enabled", sub, at, email="jane@privaterelay.appleid.com", is_private_email=True)
    assert receiver.post(with_address, webhook_id, "v1a") == (200, "applied")
    assert receiver.user(sub)[3] == "jane@privaterelay.appleid.com"
    assert wait_until(lambda: webhook_id in receiver.log.read_text(), timeout=5)
    lines = [line for line in receiver.log.read_text().splitlines() if webhook_id in line]
    assert [json.loads(line) for line in lines] == [{"webhook_id": webhook_id, "status": 200, "outcome": "applied"}]
    log = receiver.log.read_text()
    assert "@" not in log and sub not in log and "privaterelay" not in log


def test_a_body_over_64_kib_is_refused_with_413_and_changes_nothing(receiver):
    sub, webhook_id, at = new_user()
    receiver.add_session("before", sub, at - 1000)
    padded = body("consent-revoked", sub, at)[:-1] + b"," + b'"padding":"' + b"x" * 65536 + b'"}'
    assert receiver.post(padded, webhook_id, "v1") == (413, "body_too_large")
    assert receiver.sessions(sub) == ["before"] and receiver.delivery(webhook_id) is None
