"""Clean results in a real browser (SPEC §8.2, §8.5).

- every hostile payload of the corpus, sanitized and rendered on the owner's page and on a
  share page, runs no script, opens no dialog and sends no request;
- the realistic result keeps its styles, tooltips, table and design block, fits a 390 px
  phone and its frame is sized to it;
- a mentor opens a share link at 390 px, reads the result, and gets no cookie;
- the live preview shows the draft with its styles while the owner types.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from models import db
from services.core.actors import Actor
from services.core.sanitize import sanitize_result_html
from services.results import results, shares
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll
from tests.hostile_html import HOSTILE

pytestmark = pytest.mark.browser

HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
# Elements and attributes that must not exist in a rendered result frame.
FORBIDDEN_IN_FRAME = """(doc) => {
  const bad = [];
  // The head is the frame document's own (templates/results/_frame_document.html).
  const head = Array.from(doc.head.children).map((el) => el.outerHTML);
  if (head.length !== 5 || !head[4].includes("/static/css/result_frame.css")) bad.push("head: " + head.join(" "));
  doc.body.querySelectorAll("script, iframe, frame, object, embed, link, meta, base, form, "
                       + "use, animate, set, animateMotion, animateTransform, foreignObject, image, feImage, "
                       + "input, button, textarea, select, video, audio, portal")
     .forEach((el) => bad.push(el.outerHTML.slice(0, 80)));
  doc.body.querySelectorAll("*").forEach((el) => {
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name.startsWith("hx-") || name.startsWith("data-hx-") || name === "style"
          || name.includes(":")) bad.push(el.tagName + " " + name);
    }
  });
  return bad;
}"""


def _with_result(app, make_experiment, body: str, *, status="shared", raw=False, title=TITLE) -> int:
    """An experiment with this result; "shared" is reached by promoting it (what links show)."""
    number = make_experiment(title, status="awaiting_promotion" if status == "shared" else status)
    with app.app_context():
        experiment = experiments.get_experiment(number)
        if raw:  # already sanitized, payload by payload: store as the save would
            experiment.body, experiment.has_clean_result = body, True
        else:
            results.save_clean_result(experiment, body, Actor("agent", None, "analyzer"), title=title)
        if status == "shared":
            results.promote(experiment, "shared", Actor("owner", None, "Owner"), confirm_lint=True)
        db.session.commit()
    return number


def _share(app, **fields) -> str:
    with app.app_context():
        if "number" in fields:
            fields["experiment"] = experiments.get_experiment(fields.pop("number"))
        _link, token = shares.create_link(**fields)
        db.session.commit()
        return token


def _watch(page, base_url: str) -> dict:
    """Every request, dialog and console message the page causes from now on."""
    seen = {"requests": [], "dialogs": [], "console": []}
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("console", lambda m: seen["console"].append(f"{m.type}: {m.text}"))
    return seen


def _foreign(requests: list[str], base_url: str, allowed_paths: tuple[str, ...]) -> list[str]:
    """Requests that left the page's own origin or asked for anything but the allowed paths."""
    base = urlsplit(base_url)
    bad = []
    for url in requests:
        parts = urlsplit(url)
        if (parts.scheme, parts.netloc) != (base.scheme, base.netloc) or not parts.path.startswith(allowed_paths):
            bad.append(url)
    return bad


# The result's own frame: not the first screen's primary figure, not a figure of the grid.
RESULT_FRAME = "iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)"


def _frames(page):
    return page.locator(RESULT_FRAME)


def _frame_doc_check(page, selector="iframe[data-result-frame]"):
    """Run FORBIDDEN_IN_FRAME in every result frame of the page (same-origin, readable)."""
    return page.evaluate(f"""() => {{
      const check = {FORBIDDEN_IN_FRAME};
      return Array.from(document.querySelectorAll("{selector}")).flatMap((f) => check(f.contentDocument));
    }}""")


def test_the_hostile_corpus_is_inert_in_the_browser(app, browser_session, owner_account, make_experiment,
                                                    live_server):
    """Does a page rendering every sanitized payload (owner page and share page) run no script,
    open no dialog, send no request beyond itself and its static files, and hold no handler?"""
    body = "\n".join(f"<div>{sanitize_result_html(payload)}</div>" for payload in HOSTILE)
    number = _with_result(app, make_experiment, body, raw=True)
    token = _share(app, scope="experiment", number=number)

    session = browser_session(PHONE)
    page = session.login()
    seen = _watch(page, live_server.url)
    page.goto(f"/experiments/{number}")
    _frames(page).first.wait_for()
    page.wait_for_load_state("networkidle")
    # Hover and click through the frame as a curious reader would (handlers would fire now).
    frame = _frames(page).first.content_frame
    for index in range(min(frame.locator("a, svg *, details, summary, div").count(), 60)):
        target = frame.locator("a, svg *, details, summary, div").nth(index)
        if target.is_visible():
            target.hover(timeout=1_000, force=True)  # force: a zero-size <circle r="5"> inside a hidden <svg>
    page.wait_for_timeout(300)
    assert seen["dialogs"] == []
    assert _foreign(seen["requests"], live_server.url, (f"/experiments/{number}", "/static/")) == []
    assert _frame_doc_check(page) == []
    assert_clean(session)

    mentor = browser_session(PHONE)
    mentor_page = mentor.page
    seen = _watch(mentor_page, live_server.url)
    mentor_page.goto(f"/s/{token}")
    _frames(mentor_page).first.wait_for()
    mentor_page.wait_for_load_state("networkidle")
    assert seen["dialogs"] == []
    assert _foreign(seen["requests"], live_server.url, (f"/s/{token}", "/static/")) == []
    assert _frame_doc_check(mentor_page) == []
    assert [m for m in seen["console"] if "security policy" in m.lower()] == []
    assert mentor.context.cookies() == []


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_the_realistic_result_is_intact_and_fits(app, browser_session, owner_account, make_experiment, viewport):
    """Are styles, tooltips, table and design block all there; does the frame fit its content
    with no horizontal overflow; does opening the design block grow the frame?"""
    number = _with_result(app, make_experiment, HTML, status="awaiting_promotion")
    session = browser_session(viewport)
    page = session.login()
    page.goto(f"/experiments/{number}#clean-result")
    frame_element = _frames(page).first
    frame_element.wait_for()
    frame = frame_element.content_frame
    frame.locator("#tldr").wait_for()
    assert frame.locator("circle > title").count() == 10
    assert frame.locator("circle > title").first.text_content() == "Shuffled, seed 1: 2.890"
    assert frame.locator("table.runs td").count() == 8
    assert frame.locator("#tldr").evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(243, 246, 255)"
    assert frame.locator("circle").nth(5).evaluate("e => getComputedStyle(e).fill") == "rgb(53, 82, 200)"
    page.wait_for_function("""() => { const f = document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)');
        const d = f.contentDocument; return d && Math.abs(f.clientHeight - d.documentElement.scrollHeight) <= 2; }""")
    closed = frame_element.evaluate("f => f.clientHeight")
    frame.get_by_text("Experimental design").click()
    page.wait_for_function(f"() => document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)').clientHeight > {closed} + 100")
    assert frame.get_by_text("Kill criterion").is_visible()
    assert_no_sideways_scroll(page, "the result page")
    assert frame_element.evaluate("f => f.contentDocument.documentElement.scrollWidth - f.clientWidth") <= 0
    assert_clean(session)


def test_a_mentor_reads_a_share_link_on_a_phone(app, browser_session, make_experiment, live_server):
    """At 390 px, can a mentor open the list, open the result and read it, with no cookie and
    no request leaving the share pages and static files?"""
    number = _with_result(app, make_experiment, HTML)
    token = _share(app, scope="all_promoted", label="Results for Dr. Ada")
    mentor = browser_session(PHONE)
    page = mentor.page
    seen = _watch(page, live_server.url)
    page.goto(f"/s/{token}")
    page.get_by_role("heading", name="Results for Dr. Ada").wait_for()
    page.get_by_role("link", name="Curriculum ordering changes final loss by <1%").click()
    page.wait_for_url(f"**/s/{token}/{number}")
    frame = _frames(page).first.content_frame
    assert "5 seeds × 2 orderings" in frame.locator("#tldr").inner_text()
    assert page.get_by_text("MODERATE confidence").is_visible()
    page.wait_for_function("""() => { const f = document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)');
        return Math.abs(f.clientHeight - f.contentDocument.documentElement.scrollHeight) <= 2; }""")
    assert_no_sideways_scroll(page, "the shared result")
    assert page.locator("form").count() == 0
    assert mentor.context.cookies() == []
    assert _foreign(seen["requests"], live_server.url, (f"/s/{token}", "/static/")) == []
    assert_clean(mentor)


def test_a_revoked_link_is_not_found_in_the_browser(app, browser_session, make_experiment):
    """Does a revoked link show the same "Not found" page, with no cookie?"""
    number = _with_result(app, make_experiment, HTML)
    token = _share(app, scope="experiment", number=number)
    with app.app_context():
        from models import ShareLink
        shares.revoke(db.session.scalar(db.select(ShareLink.id)))
        db.session.commit()
    mentor = browser_session(PHONE)
    response = mentor.page.goto(f"/s/{token}")
    assert response.status == 404 and mentor.page.get_by_role("heading", name="Not found").is_visible()
    assert mentor.context.cookies() == []


def test_live_preview_shows_the_draft_with_its_styles(app, browser_session, owner_account, make_experiment):
    """Does typing in the editor show a styled, sandboxed preview and its lint, without saving?"""
    number = make_experiment("Draft", status="clean_result_drafting")
    session = browser_session(DESKTOP)
    page = session.login()
    page.goto(f"/experiments/{number}")
    page.get_by_text("Write the clean result").click()
    page.get_by_label("HTML").fill(HTML + "<script>window.parent.pwned = 1</script>")
    preview = page.locator("#result-preview iframe[data-result-frame]")
    preview.wait_for(timeout=5_000)
    frame = preview.content_frame
    frame.locator("#tldr").wait_for()
    assert frame.locator("#tldr").evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(243, 246, 255)"
    assert page.locator("#result-preview .lint-failed").is_visible()  # "Draft" has no confidence suffix
    assert page.evaluate("window.pwned") is None
    assert _frame_doc_check(page, "#result-preview iframe") == []
    with app.app_context():
        assert not experiments.get_experiment(number).has_clean_result
    assert_clean(session)


def test_a_link_to_the_figure_scrolls_to_it_and_keeps_the_frame(app, browser_session, owner_account,
                                                               make_experiment):
    """Clicking "the figure" (href="#figure") in the result: does the frame stay on the result (not
    navigate to a refused page) while the page scrolls the figure into view?"""
    number = _with_result(app, make_experiment, HTML, status="awaiting_promotion")
    session = browser_session(PHONE)
    page = session.login()
    page.goto(f"/experiments/{number}")
    frame_element = _frames(page).first
    frame = frame_element.content_frame
    frame.locator("#tldr").wait_for()
    page.evaluate("window.scrollTo(0, 0)")
    frame.get_by_role("link", name="the figure").click()
    page.wait_for_function("""() => { const f = document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)');
        const fig = f.contentDocument.getElementById('figure');
        const top = f.getBoundingClientRect().top + fig.getBoundingClientRect().top;
        return top >= -2 && top < window.innerHeight / 2; }""")
    assert frame_element.evaluate("f => f.contentDocument.getElementById('tldr') !== null")
    assert frame_element.evaluate("f => f.contentWindow.location.href") == "about:srcdoc"
    assert_clean(session)


LIGHT_ONLY_RESULT = ('<style>.tldr { background: #f3f6ff; border-left: 4px solid #3552c8; }</style>'
                     '<section class="tldr" id="tldr"><p>Boxed finding.</p></section>')
DARK_AWARE_RESULT = ('<style>.tldr { background: #f3f6ff; } @media (prefers-color-scheme: dark) '
                     '{ .tldr { background: #222; } }</style><section class="tldr" id="tldr"><p>Boxed finding.</p></section>')


@pytest.mark.parametrize("body, background", [(LIGHT_ONLY_RESULT, "rgb(24, 28, 35)"),
                                              (DARK_AWARE_RESULT, "rgb(24, 28, 35)")])
def test_a_result_styled_for_light_only_stays_readable_in_dark_mode(app, browser_session, owner_account,
                                                                    make_experiment, body, background):
    """A result whose own stylesheet paints light boxes without a text colour (as old results
    do) keeps its own dark text on its light box — the dark frame's light text on that box was
    unreadable — and the whole is turned over, so the card is dark, not bright white, in a
    dark page (tests/e2e/test_owner_first_browser.py checks its pixels). A result that styles
    its own dark mode follows the page."""
    number = _with_result(app, make_experiment, body, status="awaiting_promotion")
    session = browser_session(DESKTOP, color_scheme="dark")
    page = session.login()
    page.goto(f"/experiments/{number}")
    frame_element = _frames(page).first
    frame_element.content_frame.get_by_text("Boxed finding.").wait_for()
    page.wait_for_function("""(background) => {
        const d = document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)').contentDocument;
        return getComputedStyle(d.documentElement).backgroundColor === background; }""", arg=background)
    if body == LIGHT_ONLY_RESULT:
        text = frame_element.evaluate("""f => getComputedStyle(f.contentDocument.querySelector('#tldr p')).color""")
        assert text == "rgb(27, 31, 36)"  # the light page's dark text, on the light box, as authored…
        turned = frame_element.evaluate("""f => getComputedStyle(f.contentDocument.body).filter""")
        assert turned == "invert(1) hue-rotate(180deg)"  # …then the whole turned over for the dark page
    assert_clean(session)


@pytest.mark.parametrize("how", ["system", "toggle"])
def test_the_result_frame_is_dark_in_dark_mode(app, browser_session, owner_account, make_experiment, how):
    """With the system in dark mode, or the page switched to dark, is the frame's page dark too?"""
    number = _with_result(app, make_experiment, "<p>Plain result text.</p>", status="awaiting_promotion")
    session = browser_session(DESKTOP, color_scheme="dark" if how == "system" else "light")
    page = session.login()
    if how == "toggle":
        page.evaluate("localStorage.setItem('sagan-theme', 'dark')")
    page.goto(f"/experiments/{number}")
    frame_element = _frames(page).first
    frame_element.content_frame.get_by_text("Plain result text.").wait_for()
    page.wait_for_function("""() => { const d = document.querySelector('iframe[data-result-frame]:not(.summary-frame):not(.figure-frame)').contentDocument;
        return getComputedStyle(d.documentElement).backgroundColor === 'rgb(24, 28, 35)'; }""")
    assert_clean(session)
