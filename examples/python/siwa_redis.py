"""How the examples connect to Redis: one URL, or Redis Sentinel (redis-py's Sentinel).

With Sentinel, the same settings as the endpoint: the sentinels' host:port list, the
monitored master's name, the sentinels' own password if they have one, and a Redis URL
that gives only the database, ACL user and password of the data nodes (its host and
port are not used). redis-py then asks the sentinels for the primary, and asks again
when a connection fails or the node turns out to be a replica: a failover needs
nothing from the caller but a retry of the command that failed.
"""

import argparse
import urllib.parse

import redis  # redis-py
from redis.sentinel import Sentinel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0",
                        help="redis://[user:password@]host:port/db; with --sentinels only user, password and db count")
    parser.add_argument("--sentinels", help="host:port,host:port,... (SIWA_REDIS_SENTINELS)")
    parser.add_argument("--sentinel-master", help="the monitored master's name (SIWA_REDIS_SENTINEL_MASTER)")
    parser.add_argument("--sentinel-password", help="the sentinels' password (SIWA_REDIS_SENTINEL_PASSWORD)")


def connect(args: argparse.Namespace) -> redis.Redis:
    if not args.sentinels:
        return redis.Redis.from_url(args.redis_url)
    if not args.sentinel_master:
        raise SystemExit("--sentinel-master is required with --sentinels")
    url = urllib.parse.urlparse(args.redis_url)
    database = int(url.path.lstrip("/") or 0)
    password = urllib.parse.unquote(url.password) if url.password else None
    username = urllib.parse.unquote(url.username) if url.username else None
    sentinels = []
    for item in args.sentinels.split(","):
        host, _, port = item.strip().rpartition(":")
        sentinels.append((host.strip("[]"), int(port)))
    sentinel = Sentinel(sentinels, socket_timeout=1.0,
                        sentinel_kwargs={"password": args.sentinel_password, "socket_timeout": 1.0})
    return sentinel.master_for(args.sentinel_master, db=database, username=username or None, password=password,
                               socket_timeout=2.0)


def with_retry(operation, attempts: int = 20, pause: float = 0.5):
    """Runs operation(); during a failover (no primary for a few seconds) tries again."""
    import time

    for attempt in range(attempts):
        try:
            return operation()
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
    return None
