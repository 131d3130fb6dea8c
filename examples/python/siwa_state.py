#!/usr/bin/env python3
"""Reads the state siwa-endpoint writes to Redis: what an app server asks.

Only the Redis contract is used (see docs/contract.md, "The Redis contract"):

    <prefix>:user:{<client_id>:<sub>}   hash, the user's state (times in Unix ms)

After an app transfer, see siwa_transfer.py (a transfer identifier or an old sub to the
new sub, and whether an address is Apple's private relay).

    python3 siwa_state.py --redis-url redis://127.0.0.1:6379/0 \
        --client-id com.example.app --sub 001234.abc.0123 --session-started-at 1796000000000

With Redis Sentinel: --sentinels host:port,... --sentinel-master NAME (see siwa_redis.py).
With Redis Cluster: --cluster-nodes host:port,... --prefix {siwa} (see siwa_redis.py).
"""

import argparse
import json
import sys

import redis  # redis-py

from siwa_redis import add_arguments, connect, with_retry


def user_key(client_id: str, sub: str, prefix: str = "siwa") -> str:
    # {client_id:sub} is a hash tag: all of one user's keys share a cluster slot.
    return f"{prefix}:user:{{{client_id}:{sub}}}"


def session_is_valid(r: redis.Redis, client_id: str, sub: str, session_started_at_ms: int,
                     prefix: str = "siwa") -> bool:
    """A session is invalid if it began at or before the latest consent-revoked or
    account-deleted event for this user in this app. After an app transfer, an old sub
    linked to its new one (transferred_to) counts the new sub's events too."""
    revoked_at, moved_to = r.hmget(user_key(client_id, sub, prefix), "sessions_revoked_at", "transferred_to")
    times = [revoked_at]
    if moved_to is not None:
        times.append(r.hget(user_key(client_id, moved_to.decode(), prefix), "sessions_revoked_at"))
    known = [int(time) for time in times if time is not None]
    return not known or session_started_at_ms > max(known)


def user_state(r: redis.Redis, client_id: str, sub: str, prefix: str = "siwa") -> dict:
    fields = {k.decode(): v.decode() for k, v in r.hgetall(user_key(client_id, sub, prefix)).items()}
    return {
        "account_deleted": "account_deleted_at" in fields,
        "email_forwarding": fields.get("email_forwarding"),  # "enabled", "disabled" or None
        "sessions_revoked_at": int(fields["sessions_revoked_at"]) if "sessions_revoked_at" in fields else None,
        "last_event_type": fields.get("last_event_type"),
    }


def google_user_key(client_id: str, sub: str, prefix: str = "siwa") -> str:
    # Google's users (contract version 2): sub is the Google account ID, client_id the OAuth client ID.
    return f"{prefix}:google:user:{{{client_id}:{sub}}}"


def google_session_is_valid(r: redis.Redis, client_id: str, sub: str, session_started_at_ms: int,
                            prefix: str = "siwa") -> bool:
    """A Google session is invalid if it began at or before the latest sessions-revoked,
    tokens-revoked or account-disabled (hijacking) for this user in this app, or while
    Google says the account is disabled."""
    revoked_at, disabled = r.hmget(google_user_key(client_id, sub, prefix), "sessions_revoked_at", "account_disabled")
    if disabled == b"true":
        return False
    return revoked_at is None or session_started_at_ms > int(revoked_at)


def google_user_state(r: redis.Redis, client_id: str, sub: str, prefix: str = "siwa") -> dict:
    fields = {k.decode(): v.decode() for k, v in r.hgetall(google_user_key(client_id, sub, prefix)).items()}
    return {
        "account_disabled": fields.get("account_disabled") == "true",
        "account_disabled_reason": fields.get("account_disabled_reason"),
        "sessions_revoked_at": int(fields["sessions_revoked_at"]) if "sessions_revoked_at" in fields else None,
        "last_event_type": fields.get("last_event_type"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--sub", required=True)
    parser.add_argument("--session-started-at", type=int, required=True, help="Unix milliseconds")
    parser.add_argument("--prefix", default="siwa")
    parser.add_argument("--provider", choices=["apple", "google"], default="apple",
                        help="google: the Google user's state (--client-id an OAuth client ID, --sub the account ID)")
    args = parser.parse_args()

    r = connect(args)
    if args.provider == "google":
        state = with_retry(lambda: google_user_state(r, args.client_id, args.sub, args.prefix))
        state["session_valid"] = with_retry(
            lambda: google_session_is_valid(r, args.client_id, args.sub, args.session_started_at, args.prefix))
        print(json.dumps(state, sort_keys=True))
        return 0
    state = with_retry(lambda: user_state(r, args.client_id, args.sub, args.prefix))
    state["session_valid"] = with_retry(
        lambda: session_is_valid(r, args.client_id, args.sub, args.session_started_at, args.prefix))
    print(json.dumps(state, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
