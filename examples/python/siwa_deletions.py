#!/usr/bin/env python3
"""Acts once per account deletion: reads the siwa:deletions stream with a consumer group.

Apple sends `account-deleted` once (and native apps get no callback): this is the
queue a deletion job drains. Each entry is acknowledged after it is handled, so a
crash re-delivers it (at least once: make the handling idempotent).

    python3 siwa_deletions.py --redis-url redis://127.0.0.1:6379/0 [--group account-cleanup]

Prints one JSON line per deletion handled; exits when the stream has nothing new.
With Redis Cluster: --cluster-nodes host:port,... --prefix {siwa} (see siwa_redis.py).
With Redis Sentinel: --sentinels host:port,... --sentinel-master NAME (see siwa_redis.py);
the group's position lives in Redis, so after a failover it resumes where it stopped.
"""

import argparse
import json
import sys

import redis  # redis-py

from siwa_redis import add_arguments, connect, with_retry


def ensure_group(r: redis.Redis, stream: str, group: str) -> None:
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as error:
        if "BUSYGROUP" not in str(error):  # the group exists already: fine
            raise


def drain_deletions(r: redis.Redis, handle, group: str, consumer: str, prefix: str = "siwa") -> int:
    # The deletions stream: every entry is an `account-deleted`, so the group's lag is
    # exactly its deletions not yet handled (what /metrics and `siwa-endpoint deletions` show).
    stream = f"{prefix}:deletions"
    ensure_group(r, stream, group)
    handled = 0
    # "0": this consumer's entries delivered before (a crash, a failover) and never
    # acknowledged; then ">": the entries no consumer of the group has seen.
    for start in ("0", ">"):
        while True:
            batches = r.xreadgroup(group, consumer, {stream: start}, count=100, block=None)
            entries = [entry for _, batch in batches or [] for entry in batch]
            if not entries:
                break
            for entry_id, fields in entries:
                handle(fields[b"client_id"].decode(), fields[b"sub"].decode(), int(fields[b"event_time"]))
                handled += 1
                r.xack(stream, group, entry_id)
    return handled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--group", default="account-cleanup")
    parser.add_argument("--consumer", default="worker-1")
    parser.add_argument("--prefix", default="siwa")
    args = parser.parse_args()

    def handle(client_id: str, sub: str, event_time: int) -> None:
        # Your deletion duty goes here: delete what you hold for (client_id, sub).
        print(json.dumps({"client_id": client_id, "sub": sub, "event_time": event_time}, sort_keys=True))

    r = connect(args)
    # Entries delivered but not acknowledged before a crash or a failover come first (id 0),
    # then the new ones.
    with_retry(lambda: drain_deletions(r, handle, args.group, args.consumer, args.prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
