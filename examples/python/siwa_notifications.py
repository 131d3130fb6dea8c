#!/usr/bin/env python3
"""Drops cached sessions the moment a notification arrives: subscribes to siwa:notifications.

Each message is the JSON siwa-endpoint publishes (never an email address):
{"client_id","sub","type","raw_type","event_time","jti","applied"}. Pub/sub is fire and
forget: a message published while the subscriber is disconnected is not delivered
again, so the subscriber resubscribes at once, and the user hash (siwa_state.py) stays
the source of truth; pub/sub only makes the reaction immediate.

    python3 siwa_notifications.py --redis-url redis://127.0.0.1:6379/0 [--count N] [--timeout S]

With Redis Cluster: --cluster-nodes host:port,... --prefix {siwa} (see siwa_redis.py).
With Redis Sentinel: --sentinels host:port,... --sentinel-master NAME (see siwa_redis.py);
after a failover it reconnects to the new primary and subscribes again.
Prints one JSON line per message (and {"subscribed": true} each time it subscribes).
"""

import argparse
import json
import sys
import time

import redis  # redis-py

from siwa_redis import add_arguments, connect, is_certificate_refusal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--prefix", default="siwa")
    parser.add_argument("--count", type=int, default=0, help="exit after this many messages (0: never)")
    parser.add_argument("--timeout", type=float, default=0, help="exit after this many seconds (0: never)")
    args = parser.parse_args()

    r = connect(args)
    channel = f"{args.prefix}:notifications"
    deadline = time.monotonic() + args.timeout if args.timeout else None
    received = 0
    while deadline is None or time.monotonic() < deadline:
        try:
            pubsub = r.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(channel)
            print(json.dumps({"subscribed": True}), flush=True)
            while deadline is None or time.monotonic() < deadline:
                message = pubsub.get_message(timeout=0.5)
                if message is None:
                    continue
                # Your cache eviction goes here: drop sessions of (client_id, sub).
                print(json.dumps(json.loads(message["data"]), sort_keys=True), flush=True)
                received += 1
                if args.count and received >= args.count:
                    return 0
        except (redis.ConnectionError, redis.TimeoutError) as error:
            if is_certificate_refusal(error):
                raise  # no wait ends it: a new certificate or the right CA file does
            time.sleep(0.2)  # the primary is gone: ask the sentinels again and resubscribe
    return 0 if not args.count else 1


if __name__ == "__main__":
    sys.exit(main())
