"""The app the benchmarks serve (granian, as deployed: serve.py): the product's app, plus bench-only parts.

- `GET /bench/hello`: a bare endpoint (public, no database), the yardstick for request
  rates on the same server;
- every response carries `X-Bench-Server-Ms` (time from the WSGI call to the response
  headers, the body already rendered), `X-Bench-Cpu-Ms` (the CPU time of the request's
  thread over the same span: what the request cost, which moves far less with the load
  other work puts on the machine than the wall time does) and `X-Bench-Queries` (SQL
  statements executed).

None of this is in the product: `serve.command(target="bench.wsgi:create_bench_app")` only.
"""
from __future__ import annotations

import threading
import time

import sqlalchemy as sa

import serve

# Per thread: a granian worker runs several requests at once, one per thread.
_counter = threading.local()


def _count(*_args, **_kwargs) -> None:
    _counter.queries = getattr(_counter, "queries", 0) + 1


class Timing:
    """WSGI middleware adding the server time and query count headers (the count is the
    thread's: a request runs on one thread from start to end)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        _counter.queries = 0
        start = time.perf_counter()
        cpu_start = time.thread_time()

        def timed_start_response(status, headers, exc_info=None):
            elapsed = (time.perf_counter() - start) * 1000
            cpu = (time.thread_time() - cpu_start) * 1000
            headers = list(headers) + [("X-Bench-Server-Ms", f"{elapsed:.3f}"), ("X-Bench-Cpu-Ms", f"{cpu:.3f}"),
                                       ("X-Bench-Queries", str(_counter.queries))]
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
    app.wsgi_app = serve.without_process_environment(Timing(app.wsgi_app))
    return serve.ready_to_serve(app)
