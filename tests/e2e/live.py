"""A real Sagan server in a background thread, and the one way we start Chromium.

Shared by the browser tests' fixtures (tests/e2e/conftest.py) and the screenshot script
(tests/e2e/screenshots.py), so both drive the same server the same way.
"""
from __future__ import annotations

import os
import threading

from werkzeug.serving import WSGIRequestHandler, make_server

# Debian's Chromium: Playwright's own browser download is not available on our machines.
CHROMIUM_PATH = os.environ.get("SAGAN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


class _QuietHandler(WSGIRequestHandler):
    """Keep errors in the log, drop the one line per request (polls make many)."""

    def log_request(self, code="-", size="-") -> None:
        pass


class LiveServer:
    """Serve `app` on 127.0.0.1 and a free port until `stop()`.

    Threaded, like a real deployment's workers: the board's poll and a card move can be
    in flight at once. The port is picked by the OS (port 0), so parallel runs never clash.
    """

    def __init__(self, app, host: str = "127.0.0.1") -> None:
        self.app = app
        self._server = make_server(host, 0, app, threaded=True,
                                   request_handler=_QuietHandler)
        self.host = host
        self.port = self._server.server_port
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="sagan-live-server",
                                        daemon=True)

    def start(self) -> "LiveServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> "LiveServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def chromium_missing_message() -> str | None:
    """Why Chromium cannot start here, or None when it can."""
    if not os.path.exists(CHROMIUM_PATH):
        return (f"Chromium is not installed at {CHROMIUM_PATH}. Install it with "
                "`apt-get install chromium` (or point SAGAN_CHROMIUM at a Chromium binary); "
                "Playwright's own browser download is not used.")
    return None


def launch_chromium(playwright):
    """Start Debian's Chromium headless through Playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)


# Recorded in every page before its own scripts run (Playwright's init scripts are not
# subject to the page's CSP), so a test can assert that nothing was refused.
CSP_RECORDER = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
                              " (" + (e.sourceFile || "") + ":" + (e.lineNumber || 0) + ")");
});
"""
