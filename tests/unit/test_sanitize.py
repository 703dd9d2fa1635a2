"""The one sanitizing pipeline: hostile markup comes out inert, ordinary markdown intact."""
import pytest

from services.core.sanitize import render_markdown, sanitize_html

HOSTILE = [
    '<script>alert(1)</script>',
    '<SCRIPT SRC=//evil.example/x.js></SCRIPT>',
    '<img src=x onerror=alert(1)>',
    '<a href="javascript:alert(1)">x</a>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<a href="&#106;avascript:alert(1)">x</a>',
    '<a href="data:text/html;base64,PHNjcmlwdD4=">x</a>',
    '<div hx-post="/board/move/1" hx-trigger="load">x</div>',
    '<div data-hx-get="/api-tokens">x</div>',
    '<iframe src="https://evil.example"></iframe>',
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
    '<base href="https://evil.example/">',
    '<link rel="stylesheet" href="https://evil.example/x.css">',
    '<form action="/logout" method="post"><button>x</button></form>',
    '<img src="https://tracker.example/pixel.png">',
    '<p style="background:url(https://evil.example/x)">x</p>',
    '<svg onload=alert(1)><script>alert(1)</script></svg>',
    '<object data="x.swf"></object><embed src="x.swf">',
]


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_markup_is_inert(payload):
    """Does each hostile input lose every script, handler, htmx attribute and remote load?"""
    out = sanitize_html(payload).lower()
    for needle in ("<script", "onerror", "onload", "javascript:", "hx-", "<iframe", "<meta", "<base",
                   "<link", "<form", "evil.example", "tracker.example", "style=", "<object", "<embed",
                   "data:text"):
        assert needle not in out, (payload, out)


def test_markdown_renders_tables_lists_code_and_safe_links():
    """Does ordinary markdown survive, with links marked noopener and code escaped?"""
    html = render_markdown("## Plan\n\n| GPU | h |\n|---|---|\n| A100 | 2 |\n\n- one\n- two\n\n"
                           "```\nx = '<b>'\n```\n\nSee https://example.org")
    assert "<h2>Plan</h2>" in html and "<table>" in html and "<li>one</li>" in html
    assert "&lt;b&gt;" in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_inline_png_images_survive():
    """Are data:image/png images (pods' figures) kept while remote images are not?"""
    out = sanitize_html('<img src="data:image/png;base64,iVBORw0KGgo=" alt="fig">')
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in out


def test_empty_input_is_empty():
    """Do None and empty strings come back empty?"""
    assert sanitize_html(None) == "" and render_markdown("") == ""
