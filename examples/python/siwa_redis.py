"""How the examples connect to Redis: one URL, Redis Sentinel (redis-py's Sentinel), or
Redis Cluster (redis-py's RedisCluster).

With Sentinel, the same settings as the endpoint: the sentinels' host:port list, the
monitored master's name, the sentinels' own password if they have one, and a Redis URL
that gives only the database, ACL user and password of the data nodes (its host and
port are not used). redis-py then asks the sentinels for the primary, and asks again
when a connection fails or the node turns out to be a replica: a failover needs
nothing from the caller but a retry of the command that failed.

With Redis Cluster, the same seed list as the endpoint (SIWA_REDIS_CLUSTER_NODES) and its
key prefix, a hash tag such as {siwa} (--prefix): every key of the contract is then in one
slot, so the reader's commands all go to that slot's primary, which redis-py finds from the
cluster itself and finds again after a failover or a slot migration (MOVED, ASK). The
Redis URL then gives only the ACL user and password (and rediss:// for TLS); a cluster has
database 0 only.

Over TLS (a rediss:// URL, one node or a cluster), the server's certificate is verified,
host name included, against --redis-tls-ca-file (SIWA_REDIS_TLS_CA_FILE) when given, else
against the system's CAs; a cluster's certificates must name the addresses the cluster
announces. A refused certificate is raised at once, never retried: no wait ends it.
"""

import argparse
import ssl
import urllib.parse

import redis  # redis-py
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0",
                        help="redis://[user:password@]host:port/db; with --sentinels only user, password and db count")
    parser.add_argument("--sentinels", help="host:port,host:port,... (SIWA_REDIS_SENTINELS)")
    parser.add_argument("--sentinel-master", help="the monitored master's name (SIWA_REDIS_SENTINEL_MASTER)")
    parser.add_argument("--sentinel-password", help="the sentinels' password (SIWA_REDIS_SENTINEL_PASSWORD)")
    parser.add_argument("--cluster-nodes", help="host:port,host:port,... seed nodes of a Redis Cluster "
                                                "(SIWA_REDIS_CLUSTER_NODES); give --prefix {siwa} with it")
    parser.add_argument("--redis-tls-ca-file", help="with rediss://: the CA file that signed the servers' "
                                                    "certificates (SIWA_REDIS_TLS_CA_FILE); default: the system's")


def host_ports(text: str) -> list:
    """host:port,host:port,... as (host, port) pairs ([::1]:port for IPv6)."""
    pairs = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


def connect(args: argparse.Namespace) -> redis.Redis:
    url = urllib.parse.urlparse(args.redis_url)
    password = urllib.parse.unquote(url.password) if url.password else None
    username = urllib.parse.unquote(url.username) if url.username else None
    # Over TLS: the certificate and its host name verified, against the given CA file.
    tls = {"ssl_cert_reqs": "required", "ssl_check_hostname": True, "ssl_ca_certs": args.redis_tls_ca_file}
    if args.cluster_nodes:
        if "{" not in args.prefix or "}" not in args.prefix:
            raise SystemExit("--cluster-nodes needs a --prefix that is a hash tag, such as {siwa}")
        nodes = [ClusterNode(host, port) for host, port in host_ports(args.cluster_nodes)]
        return RedisCluster(startup_nodes=nodes, username=username, password=password, socket_timeout=2.0,
                            **({"ssl": True, **tls} if url.scheme == "rediss" else {}))
    if not args.sentinels:
        return redis.Redis.from_url(args.redis_url, **(tls if url.scheme == "rediss" else {}))
    if not args.sentinel_master:
        raise SystemExit("--sentinel-master is required with --sentinels")
    database = int(url.path.lstrip("/") or 0)
    sentinels = host_ports(args.sentinels)
    sentinel = Sentinel(sentinels, socket_timeout=1.0,
                        sentinel_kwargs={"password": args.sentinel_password, "socket_timeout": 1.0})
    return sentinel.master_for(args.sentinel_master, db=database, username=username or None, password=password,
                               socket_timeout=2.0)


# What a failover or a slot migration raises for a while, and only for a while: no connection,
# a replica not yet promoted (READONLY), and in a cluster CLUSTERDOWN (ClusterDownError), a
# slot not yet served (SlotNotCoveredError), TRYAGAIN during a move, MOVED or ASK still
# answered after redis-py's own follows, and its "TTL exhausted" ClusterError after a storm
# of them. A cross-slot or any other error is the caller's, never retried.
RETRIED_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.TryAgainError,
    redis.exceptions.AskError,
)


def is_certificate_refusal(error: BaseException) -> bool:
    """True when the server's certificate was refused (untrusted, expired, another name):
    redis-py raises ConnectionError from ssl's verification error. No wait ends it (a new
    certificate or the right CA file does), so it is never retried."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def with_retry(operation, attempts: int = 20, pause: float = 0.5):
    """Runs operation(); during a failover or a slot migration (no primary for a few
    seconds, a cluster's slot moving) tries again. A refused server certificate is raised
    at once."""
    import time

    for attempt in range(attempts):
        try:
            return operation()
        except RETRIED_ERRORS as error:
            if attempt == attempts - 1 or is_certificate_refusal(error):
                raise
            time.sleep(pause)
    return None
