"""Does a page fit the screen it is shown on? No sideways scrolling at any width, and on a phone
every control big enough for a thumb. One copy of the rule, so every browser test holds its
pages to the same measure and a change to the rule lands everywhere at once."""
from __future__ import annotations

# The smallest target a thumb hits reliably: WCAG 2.5.5 and Apple's guidelines both say 44 px.
THUMB_PX = 44
# What a thumb presses: links that go somewhere, every form control a person can see.
CONTROLS = "a[href], button, summary, select, input:not([type=hidden]), textarea"

_OVERFLOW = "[document.documentElement.scrollWidth - window.innerWidth, window.innerWidth]"

# Each control under the size, as the start of its HTML and its size, so a failure names it.
_SMALL = """([controls, scope, exempt, bothSides, skipClosed, least]) => {
    const roots = scope ? Array.from(document.querySelectorAll(scope)) : [document];
    const found = new Set(roots.flatMap(root => Array.from(root.querySelectorAll(controls))));
    return Array.from(found)
        .filter(e => e.offsetParent !== null && !(exempt && e.matches(exempt))
                && !(skipClosed && e.closest('details:not([open])') && e.tagName !== 'SUMMARY'))
        .map(e => [e, e.getBoundingClientRect()])
        .filter(([e, r]) => r.height < least || (bothSides && r.width < least))
        .map(([e, r]) => e.outerHTML.slice(0, 80) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height));
}"""


def sideways_overflow(page) -> int:
    """How many px the page is wider than its viewport (0 or less: it fits)."""
    return page.evaluate(_OVERFLOW)[0]


def assert_no_sideways_scroll(page, what: str = "", *, slack: int = 0) -> None:
    """The page is no wider than the viewport: on a phone a sideways scroll hides half of every
    line. `what` names the page in the failure (its URL when not given); `slack` allows that many
    px for a page whose test has always tolerated a rounding pixel."""
    overflow, width = page.evaluate(_OVERFLOW)
    assert overflow <= slack, f"{what or page.url} scrolls sideways: {overflow}px wider than the {width}px viewport"


def small_controls(page, exempt: str = "", *, scope: str = "", both_sides: bool = True,
                   skip_closed_details: bool = False) -> list[str]:
    """The visible controls under THUMB_PX, each as the start of its HTML and its size.

    exempt: a selector for what a thumb hits some other way (a checkbox inside its label, a
    title stretched over its card, a link inside running text).
    scope: a selector; only controls inside what it matches count (the part of the page a test
    is about). Empty: the whole page.
    both_sides: a control must be THUMB_PX wide as well as high; False checks the height only.
    skip_closed_details: leave out what sits inside a closed <details> (its summary still
    counts): Chromium still gives that content a parent and a size, though nobody can see or
    press it until the summary opens it.
    """
    return page.evaluate(_SMALL, [CONTROLS, scope, exempt, both_sides, skip_closed_details, THUMB_PX])


def assert_thumb_sized(page, exempt: str = "", what: str = "", *, scope: str = "", both_sides: bool = True,
                       skip_closed_details: bool = False) -> None:
    """Every visible control is big enough for a thumb (see small_controls for the options);
    the failure names the page (its URL when `what` is not given) and each control too small."""
    small = small_controls(page, exempt, scope=scope, both_sides=both_sides, skip_closed_details=skip_closed_details)
    assert small == [], f"{what or page.url} has controls under {THUMB_PX}px: {small}"
