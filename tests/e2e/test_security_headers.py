"""Security headers, error-message headers and CSP-safe templates, without a browser.

These run in the default suite (no `browser` mark), so a template that sneaks in an inline
script, or an error handler that drops the message header, fails fast everywhere.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.mark.parametrize("path", ["/login", "/healthz", "/static/css/sagan.css", "/no-such-page",
                                  "/api/experiments", "/"])
def test_every_response_carries_security_headers(client, path):
    """Do pages, static files, JSON, redirects and errors all carry the security headers?"""
    response = client.get(path)
    csp = response.headers.get("Content-Security-Policy", "")
    assert "script-src 'self'" in csp and "object-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and "base-uri 'self'" in csp and "form-action 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_htmx_config_keeps_htmx_within_the_csp(client):
    """Does the page tell htmx not to eval, inject styles or run swapped scripts, and not swap 304?"""
    html = client.get("/login").text
    config = re.search(r"<meta name=\"htmx-config\" content='([^']+)'", html).group(1)
    assert '"allowEval":false' in config
    assert '"includeIndicatorStyles":false' in config
    assert '"allowScriptTags":false' in config
    assert '{"code":"304","swap":false}' in config and '{"code":"204","swap":false}' in config


def test_htmx_not_found_carries_the_message_header(htmx_client):
    """Does a 404 to an htmx request carry its sentence and code in headers for the toast?"""
    response = htmx_client.post("/board/move/99999", data={"to": "planning"},
                                headers={"X-CSRFToken": htmx_client.csrf})
    assert response.status_code == 404
    assert response.headers["X-Sagan-Error"] == "not_found"
    assert "99999" in unquote(response.headers["X-Sagan-Message"])


def test_csrf_failure_carries_code_and_reload_sentence(htmx_client, make_experiment):
    """Does a CSRF failure say `csrf_failed` and ask for a reload, in headers the script can read?"""
    number = make_experiment("Tab left open")
    response = htmx_client.post(f"/board/move/{number}", data={"to": "planning"},
                                headers={"X-CSRFToken": "expired"})
    assert response.status_code == 400
    assert response.headers["X-Sagan-Error"] == "csrf_failed"
    message = unquote(response.headers["X-Sagan-Message"])
    assert "CSRF check failed" in message and "Reload the page" in message
    message.encode("latin-1")  # header-safe after decoding too (it is ASCII-encoded on the wire)


def test_json_errors_carry_the_message_header_too(client):
    """Does an API 401 carry the same sentence in the header as in its JSON body?"""
    response = client.get("/api/experiments")
    assert response.status_code == 401
    assert unquote(response.headers["X-Sagan-Message"]) == response.json["message"]


def test_templates_have_no_inline_script_style_or_handlers():
    """Do templates avoid everything the CSP would refuse (inline scripts, styles, on* handlers)?"""
    problems = []
    for template in TEMPLATES.rglob("*.html"):
        text = re.sub(r"\{#.*?#\}", "", template.read_text(), flags=re.S)  # Jinja comments
        for match in re.finditer(r"<script\b[^>]*>", text):
            if "src=" not in match.group(0):
                problems.append(f"{template.name}: inline <script>")
        if re.search(r"<style\b", text):
            problems.append(f"{template.name}: <style> element")
        if re.search(r"\sstyle=", text):
            problems.append(f"{template.name}: style attribute")
        if re.search(r"\son[a-z]+=", text):
            problems.append(f"{template.name}: inline event handler")
        if re.search(r"hx-on[:-]|javascript:|js:", text):
            problems.append(f"{template.name}: script in an attribute (hx-on / javascript: / js:)")
    assert problems == []
