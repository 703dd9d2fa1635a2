"""The app the benchmarks serve with gunicorn: the product's app, plus bench-only parts.

- `GET /bench/hello`: a bare endpoint (public, no database), the yardstick for request
  rates on the same server;
- every response carries `X-Bench-Server-Ms` (time from the WSGI call to the response
  headers, the body already rendered) and `X-Bench-Queries` (SQL statements executed).

None of this is in the product: `gunicorn 'bench.wsgi:create_bench_app()'` only.
"""
from __future__ import annotations

import time

import sqlalchemy as sa


class _Counter:
    queries = 0


def _count(*_args, **_kwargs) -> None:
    _Counter.queries += 1


class Timing:
    """WSGI middleware adding the server time and query count headers (sync workers: one
    request at a time per process, so one counter per process is exact)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        _Counter.queries = 0
        start = time.perf_counter()

        def timed_start_response(status, headers, exc_info=None):
            elapsed = (time.perf_counter() - start) * 1000
            headers = list(headers) + [("X-Bench-Server-Ms", f"{elapsed:.3f}"),
                                       ("X-Bench-Queries", str(_Counter.queries))]
            return start_response(status, headers, exc_info)

        return self.wsgi_app(environ, timed_start_response)


def create_bench_app():
    from app import create_app
    from blueprints import access

    app = create_app()

    @access.public
    def hello():
        """The bare endpoint: no database, no template."""
        return "hello"

    app.add_url_rule("/bench/hello", "bench_hello", hello)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", _count)
    app.wsgi_app = Timing(app.wsgi_app)
    return app
