#!/usr/bin/env python3
"""After an app transfer between teams, and for private relay addresses: what an app server asks.

Only the Redis contract is used (see docs/contract.md, "App transfer records"):

    <prefix>:transfer-id:{<client_id>:<transfer_sub>}   hash, "sub": the new sub
    <prefix>:user:{<client_id>:<old sub>}               hash, "transferred_to": the new sub

    python3 siwa_transfer.py resolve --redis-url redis://127.0.0.1:6379/0 \
        --client-id com.example.app --id 001234.abc.0123     # a transfer identifier or an old sub
    python3 siwa_transfer.py relay --emails abc@private.icloud.com,someone@example.com

With Redis Sentinel or Cluster: the arguments of siwa_redis.py, as for siwa_state.py.
"""

import argparse
import json
import sys

import redis  # redis-py

from siwa_redis import add_arguments, connect, with_retry
from siwa_state import user_key

# Apple's private relay (Hide My Email) domains: new addresses use private.icloud.com, the
# older privaterelay.appleid.com ones keep working.
APPLE_RELAY_DOMAINS = ("privaterelay.appleid.com", "private.icloud.com")


def is_apple_relay(address: str) -> bool:
    """Whether an email address is one of Apple's private relay addresses (either domain)."""
    local, at, domain = address.strip().rpartition("@")
    return bool(local) and at == "@" and domain.lower() in APPLE_RELAY_DOMAINS


def transfer_key(client_id: str, transfer_sub: str, prefix: str = "siwa") -> str:
    # {client_id:transfer_sub} as the user key's tag: with --prefix {siwa}, one slot for all.
    return f"{prefix}:transfer-id:{{{client_id}:{transfer_sub}}}"


def resolve_sub(r: redis.Redis, client_id: str, identifier: str, prefix: str = "siwa"):
    """The sub a transferred user's notifications arrive under now: for a transfer identifier
    `transfer import` exchanged, or an old sub linked to its new one. None otherwise (a sub
    never transferred, or an identifier not exchanged yet): keep the identifier you have."""
    new_sub = r.hget(transfer_key(client_id, identifier, prefix), "sub")
    if new_sub is None:
        new_sub = r.hget(user_key(client_id, identifier, prefix), "transferred_to")
    return None if new_sub is None else new_sub.decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["resolve", "relay"])
    add_arguments(parser)
    parser.add_argument("--client-id")
    parser.add_argument("--id", help="a transfer identifier or an old sub")
    parser.add_argument("--emails", help="addresses, comma-separated")
    parser.add_argument("--prefix", default="siwa")
    args = parser.parse_args()
    if args.command == "relay":
        print(json.dumps({address: is_apple_relay(address) for address in args.emails.split(",")}))
        return 0
    r = connect(args)
    print(json.dumps({"sub": with_retry(lambda: resolve_sub(r, args.client_id, args.id, args.prefix))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
