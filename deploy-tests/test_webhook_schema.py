"""The published JSON Schema of the webhook body (docs/webhooks/siwa-webhook-v1.schema.json):
every example body in examples/webhooks/bodies validates, and bodies a receiver must not be
handed (an address outside the email events, a type and event_type that disagree, a member
too many, a provider where it does not belong) are refused. Each wrong body is one change away from a valid one."""

import copy
import datetime
import json

import jsonschema
import pytest

from deploy_harness import REPO

SCHEMA = json.loads((REPO / "docs/webhooks/siwa-webhook-v1.schema.json").read_text())
BODIES = sorted((REPO / "examples/webhooks/bodies").glob("*.json"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def consent_revoked():
    return json.loads((REPO / "examples/webhooks/bodies/consent-revoked.json").read_text())


def google_account_disabled():
    return json.loads((REPO / "examples/webhooks/bodies/google-account-disabled.json").read_text())


def google_sessions_revoked():
    return json.loads((REPO / "examples/webhooks/bodies/google-sessions-revoked.json").read_text())


def email_disabled():
    return json.loads((REPO / "examples/webhooks/bodies/email-disabled-with-address.json").read_text())


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_there_is_an_example_of_every_type():
    types = {json.loads(path.read_text())["type"] for path in BODIES}
    assert types == set(SCHEMA["properties"]["type"]["enum"])


@pytest.mark.parametrize("path", BODIES, ids=lambda path: path.stem)
def test_every_example_body_validates_and_is_sent_compact(path):
    text = path.read_text()
    body = json.loads(text)
    assert list(VALIDATOR.iter_errors(body)) == []
    assert text == json.dumps(body, separators=(",", ":"), ensure_ascii=False) + "\n"
    # timestamp is data.event_time, written as RFC 3339 UTC with milliseconds.
    moment = datetime.datetime.fromtimestamp(body["data"]["event_time"] / 1000, datetime.timezone.utc)
    assert body["timestamp"] == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{body['data']['event_time'] % 1000:03d}Z"


def changed(body, edit):
    body = copy.deepcopy(body)
    edit(body)
    return body


WRONG = {
    "address in consent-revoked": (consent_revoked, lambda b: b["data"].update(email="a@example.com")),
    "private flag in consent-revoked": (consent_revoked, lambda b: b["data"].update(is_private_email=False)),
    "event_type disagrees with type": (consent_revoked, lambda b: b["data"].update(event_type="account-deleted")),
    "raw_type of another type": (consent_revoked, lambda b: b["data"].update(raw_type="email-enabled")),
    "no sub": (consent_revoked, lambda b: b["data"].pop("sub")),
    "empty client_id": (consent_revoked, lambda b: b["data"].update(client_id="")),
    "event_time as a string": (consent_revoked, lambda b: b["data"].update(event_time="1796446800123")),
    "version 2": (consent_revoked, lambda b: b.update(version=2)),
    "timestamp without milliseconds": (consent_revoked, lambda b: b.update(timestamp="2026-12-05T05:00:00Z")),
    "timestamp not in UTC": (consent_revoked, lambda b: b.update(timestamp="2026-12-05T06:00:00.123+01:00")),
    "a member too many": (consent_revoked, lambda b: b.update(jti="abc")),
    "a data member too many": (email_disabled, lambda b: b["data"].update(name="Jane")),
    "type without the siwa. prefix": (consent_revoked, lambda b: b.update(type="consent-revoked")),
    "is_private_email as a string": (email_disabled, lambda b: b["data"].update(is_private_email="true")),
    "unknown carrying a known raw_type": (
        consent_revoked,
        lambda b: (b.update(type="siwa.unknown"), b["data"].update(event_type="unknown")),
    ),
    # Google's events: their provider always named, Apple's never; only their own members.
    "provider in an Apple body": (consent_revoked, lambda b: b["data"].update(provider="apple")),
    "a Google body without provider": (google_account_disabled, lambda b: b["data"].pop("provider")),
    "a Google body naming Apple": (google_account_disabled, lambda b: b["data"].update(provider="apple")),
    "an Apple type with Google's provider": (
        consent_revoked,
        lambda b: b["data"].update(provider="google"),
    ),
    "reason outside account-disabled": (google_sessions_revoked, lambda b: b["data"].update(reason="hijacking")),
    "an address in a Google event": (google_account_disabled, lambda b: b["data"].update(email="a@example.com")),
    "a Google type of another raw_type": (
        google_sessions_revoked,
        lambda b: b["data"].update(raw_type="https://schemas.openid.net/secevent/risc/event-type/account-enabled"),
    ),
    "Google's type without google.": (google_sessions_revoked, lambda b: b.update(type="siwa.sessions-revoked")),
    "Google's unknown carrying a known URI": (
        google_sessions_revoked,
        lambda b: (b.update(type="siwa.google.unknown"), b["data"].update(event_type="unknown")),
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_body_is_refused(name):
    make, edit = WRONG[name]
    assert list(VALIDATOR.iter_errors(make())) == []  # valid before the one change
    assert not VALIDATOR.is_valid(changed(make(), edit))
