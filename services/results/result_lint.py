"""Static lint of a clean result (SPEC §8.1, §8.3), run on the sanitized copy.

Each rule reports one finding, passed or not, so the experiment page can show the whole
checklist next to the result and `epm:clean-result-lint` records it. The rules read the
parsed tree; none renders anything — "renders at 360 px" is approximated by the two
things that make a page wider than a phone: fixed widths over 360 px and SVGs without
a viewBox (which cannot scale down).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from services.core.sanitize import local_name, parse_fragment, text_of

CONFIDENCE_SUFFIXES = ("(LOW confidence)", "(MODERATE confidence)", "(HIGH confidence)")
TLDR_LABELS = ("Motivation", "What I ran", "Results", "Next steps")
PHONE_WIDTH = 360
_TLDR = re.compile(r"\btl\s*;?\s*dr\b", re.I)
_PX_WIDTH = re.compile(r"(?<![\w-])(min-width|width)\s*:\s*(\d+(?:\.\d+)?)px", re.I)


@dataclass(frozen=True)
class Finding:
    rule: str
    ok: bool
    message: str


@dataclass(frozen=True)
class LintReport:
    findings: list[Finding]

    @property
    def passed(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def summary(self) -> str:
        if self.passed:
            return f"Lint passed ({len(self.findings)} checks)."
        return f"Lint: {len(self.problems)} problem(s) — " + "; ".join(f.message for f in self.problems)

    def as_json(self) -> dict:
        return {"passed": self.passed, "findings": [asdict(f) for f in self.findings]}


def confidence_of(title: str | None) -> str | None:
    """"LOW" / "MODERATE" / "HIGH" from a title's suffix, or None."""
    for suffix in CONFIDENCE_SUFFIXES:
        if (title or "").rstrip().endswith(suffix):
            return suffix[1:].split()[0]
    return None


def title_without_confidence(title: str | None) -> str:
    for suffix in CONFIDENCE_SUFFIXES:
        if (title or "").rstrip().endswith(suffix):
            return title.rstrip()[: -len(suffix)].rstrip()
    return title or ""


def lint(title: str | None, body: str | None) -> LintReport:
    """Every rule of SPEC §8.3 against a title and a sanitized body."""
    root = parse_fragment(body or "")
    elements = [e for e in root.iter() if isinstance(e.tag, str)]
    return LintReport([
        _title_rule(title),
        *_tldr_rules(root, elements),
        _figure_rule(elements),
        _details_rule(elements),
        _h2_rule(root),
        _tooltip_rule(elements),
        _width_rule(elements),
        _viewbox_rule(elements),
    ])


def _title_rule(title: str | None) -> Finding:
    if confidence_of(title):
        return Finding("title-confidence", True, "The title ends with a confidence suffix.")
    return Finding("title-confidence", False,
                   'The title should state the finding and end with "(LOW confidence)", '
                   '"(MODERATE confidence)" or "(HIGH confidence)".')


def _tldr_list(root, elements):
    """The list that follows the TL;DR heading (or sits in a TL;DR section), if any."""
    for element in elements:
        name = local_name(element.tag)
        if name in ("section", "div", "header") and (_TLDR.search(element.get("id", "") + " "
                                                                  + element.get("class", ""))):
            found = next((e for e in element.iter() if local_name(e.tag) in ("ul", "ol")), None)
            if found is not None:
                return found
        if name in ("h1", "h2", "h3", "h4", "p", "strong", "b", "summary") and _TLDR.search(text_of(element)):
            seen = False
            for candidate in elements:
                if candidate is element:
                    seen = True
                elif seen and local_name(candidate.tag) in ("ul", "ol"):
                    return candidate
    return None


def tldr_items(body: str | None) -> list:
    """The TL;DR's bullets (`<li>` elements) of a sanitized body, in order; [] without a TL;DR."""
    root = parse_fragment(body or "")
    tldr = _tldr_list(root, [e for e in root.iter() if isinstance(e.tag, str)])
    return [] if tldr is None else [e for e in tldr if local_name(e.tag) == "li"]


def tldr_label(item) -> str | None:
    """Which of the four TL;DR labels a bullet starts with (Motivation, What I ran, …), or None."""
    text = text_of(item).strip().lower()
    return next((label for label in TLDR_LABELS if text.startswith(label.lower())), None)


def _tldr_rules(root, elements) -> list[Finding]:
    tldr = _tldr_list(root, elements)
    if tldr is None:
        return [Finding("tldr", False, "No TL;DR: start with a TL;DR heading and a list of four bullets "
                                       "(Motivation; What I ran; Results; Next steps)."),
                Finding("results-link-figure", False, "The Results bullet should link to the figure (#figure).")]
    items = [e for e in tldr if local_name(e.tag) == "li"]
    texts = [text_of(item).lower() for item in items]
    missing = [label for label in TLDR_LABELS if not any(t.startswith(label.lower()) for t in texts)]
    if len(items) == 4 and not missing:
        tldr_finding = Finding("tldr", True, "The TL;DR has its four bullets.")
    elif missing:
        tldr_finding = Finding("tldr", False, f"The TL;DR has {len(items)} bullet(s); missing: {', '.join(missing)}.")
    else:
        tldr_finding = Finding("tldr", False, f"The TL;DR has {len(items)} bullets; it should have exactly four.")
    results = next((item for item, text in zip(items, texts) if text.startswith("results")), None)
    linked = results is not None and any(
        local_name(a.tag) == "a" and (a.get("href") or "") == "#figure" for a in results.iter())
    link_finding = Finding("results-link-figure", linked,
                           "The Results bullet links to the figure." if linked
                           else "The Results bullet should link to the figure (#figure).")
    return [tldr_finding, link_finding]


def _figure_rule(elements) -> Finding:
    figure = next((e for e in elements if local_name(e.tag) == "figure" and e.get("id") == "figure"), None)
    if figure is None:
        return Finding("primary-figure", False, 'No primary figure: add <figure id="figure"> with an SVG chart or a table.')
    has_content = any(local_name(e.tag) in ("svg", "table", "img") for e in figure.iter())
    return Finding("primary-figure", has_content,
                   "The primary figure is there." if has_content
                   else "The primary figure has no chart, table or image in it.")


def _details_rule(elements) -> Finding:
    details = [e for e in elements if local_name(e.tag) == "details"]
    if len(details) == 1:
        return Finding("design-block", True, "One collapsed <details> design block.")
    if not details:
        return Finding("design-block", False, 'No <details> "Experimental design" block.')
    return Finding("design-block", False, f"{len(details)} <details> blocks; keep one, the experimental design.")


def _h2_rule(root) -> Finding:
    """h2 only for the TL;DR heading or inside the design block."""
    stray = []

    def walk(element, inside_details: bool):
        for child in element:
            if not isinstance(child.tag, str):
                continue
            name = local_name(child.tag)
            if name == "h2" and not inside_details and not _TLDR.search(text_of(child)) \
                    and "design" not in text_of(child).lower():
                stray.append(text_of(child)[:60])
            walk(child, inside_details or name == "details")
    walk(root, False)
    if not stray:
        return Finding("no-stray-h2", True, "No headings outside the three parts.")
    return Finding("no-stray-h2", False, "Headings outside the three parts: " + ", ".join(f'"{s}"' for s in stray)
                   + ". Move them into the design block.")


def _tooltip_rule(elements) -> Finding:
    points = [e for e in elements if local_name(e.tag) == "circle"
              or (local_name(e.tag) in ("rect", "path") and re.search(r"\b(point|bar|dot)\b", e.get("class", "")))]
    bare = [p for p in points if not any(local_name(c.tag) == "title" for c in p)]
    # A <title> on the enclosing <g> covers its points too.
    parents = {child: parent for parent in elements for child in parent}
    bare = [p for p in bare if not (p in parents and local_name(parents[p].tag) == "g"
                                    and any(local_name(c.tag) == "title" for c in parents[p]))]
    if not points:
        return Finding("svg-tooltips", True, "No SVG data points to check.")
    if not bare:
        return Finding("svg-tooltips", True, f"All {len(points)} SVG data points have a <title> tooltip.")
    return Finding("svg-tooltips", False, f"{len(bare)} of {len(points)} SVG data points have no <title> tooltip.")


def _width_rule(elements) -> Finding:
    wide = []
    for element in elements:
        width = (element.get("width") or "").strip().lower()
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(px)?", width)
        if match and float(match.group(1)) > PHONE_WIDTH:
            wide.append(f'<{local_name(element.tag)} width="{width}">')
        if local_name(element.tag) == "style":
            for prop, number in _PX_WIDTH.findall(text_of(element)):
                if float(number) > PHONE_WIDTH:
                    wide.append(f"{prop}: {number}px")
    if not wide:
        return Finding("fits-360", True, f"No fixed width over {PHONE_WIDTH} px.")
    return Finding("fits-360", False, f"Fixed widths over {PHONE_WIDTH} px overflow a phone: "
                   + ", ".join(wide[:5]) + (" …" if len(wide) > 5 else "")
                   + ". Use max-width or a viewBox instead.")


def _viewbox_rule(elements) -> Finding:
    svgs = [e for e in elements if local_name(e.tag) == "svg"]
    without = [s for s in svgs if not s.get("viewBox")]
    if not without:
        return Finding("svg-viewbox", True, "Every SVG has a viewBox." if svgs else "No SVG to check.")
    return Finding("svg-viewbox", False, f"{len(without)} SVG(s) without a viewBox cannot shrink to a phone's width.")
