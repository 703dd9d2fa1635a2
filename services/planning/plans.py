"""Plan markdown → `plan_json` (SPEC §4.1–4.2).

One parser, tolerant of how planners actually write: section headings matched by name
at any of `#`/`##`/`###` and in any case; subsections such as "### Critique loop notes"
stay inside their section; a `runpod-spec` fenced block at the end; a trailer after it.
It never raises on a bad plan: it reports problems, so every submission can be kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.core.redact import redact, redact_json_text
from services.core.sanitize import render_markdown
from services.dispatch import spec as specs

SECTIONS = [
    ("Goal", "goal"), ("Hypothesis", "hypothesis"), ("Prediction", "prediction"),
    ("Kill Criterion", "kill_criterion"), ("Experimental Setup", "setup"),
    ("Compute and Hardware", "compute"), ("Artifacts", "artifacts"),
    ("Verification", "verification"), ("Risks and Red Team", "risks"),
    ("Likely Clean Result", "likely_clean_result"), ("Approval Checklist", "approval_checklist"),
]
# Sections a plan may add and pages show like the others, never counted among the 11 nor
# reported missing: the web pages the planner cited (services/agents/web_tools.py).
OPTIONAL_SECTIONS = [("Sources", "sources")]
MIN_SECTIONS_FOR_PLAN = 4
# One line of guidance per section: the plan form's template, for an owner writing a plan by
# hand. A section still holding only its guidance is not written yet: it counts as missing.
GUIDANCE = {
    "goal": "What you want to learn, in one sentence.",
    "hypothesis": "What you expect to be true, and why.",
    "prediction": "The number or outcome you expect, concrete enough to be wrong.",
    "kill_criterion": "What result would make you stop early.",
    "setup": "What runs: data, model, the conditions compared, seeds, the command.",
    "compute": "Where it runs (local pods, RunPod GPUs, or no pods for a survey) and for how long.",
    "artifacts": "What each run uploads: metrics files, figures, checkpoints.",
    "verification": "How you will know the runs did what the plan says.",
    "risks": "What could make the result misleading, and how the plan guards against it.",
    "likely_clean_result": "The table or figure you expect to show, and its one-sentence finding.",
    "approval_checklist": "- [ ] One line per thing you want to confirm before it runs",
}


def template() -> str:
    """The eleven sections with their guidance, for writing a plan by hand (no runpod-spec:
    the form says where one goes)."""
    return "\n\n".join(f"## {title}\n{GUIDANCE[field]}" for title, field in SECTIONS) + "\n"


def missing_sections(data: dict) -> list[str]:
    """The titles of the sections a parsed plan lacks, in the plan's order."""
    return [title for title, field in SECTIONS if not data.get(field)]
_TITLE_BY_KEY = {title.lower(): (title, field) for title, field in SECTIONS + OPTIONAL_SECTIONS}
_OPTIONAL_FIELDS = {field for _, field in OPTIONAL_SECTIONS}
_HEADING = re.compile(r"^[ \t]{0,3}(#{1,3})[ \t]+(.+?)[ \t#]*$")
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*runpod-spec[ \t]*$", re.IGNORECASE)
_ANY_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_CHECK_ITEM = re.compile(r"^[ \t]*[-*+][ \t]+\[([ xX])\][ \t]+(.+?)\s*$")
_TEXTBOX = re.compile(r"^[ \t]*\[TEXTBOX:([^\]\s]*)\][ \t]*$")
_KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass
class ParsedPlan:
    data: dict          # the plan_json
    problems: list[str]

    @property
    def is_plan(self) -> bool:
        return self.data["section_count"] >= MIN_SECTIONS_FOR_PLAN


def _section_of(heading_text: str) -> tuple[str, str] | None:
    text = re.sub(r"[*_`:]+", "", heading_text).strip().lower()
    text = re.sub(r"^\d+[.)]\s*", "", text)  # "3. Prediction"
    return _TITLE_BY_KEY.get(text)


def _split_spec(lines: list[str]) -> tuple[list[str], str | None, list[str], str | None]:
    """Find the last runpod-spec fence: (lines before, spec text, trailer lines, error)."""
    opens = [i for i, line in enumerate(lines) if _FENCE_OPEN.match(line)]
    if not opens:
        return lines, None, [], None
    start = opens[-1]
    fence = _FENCE_OPEN.match(lines[start]).group(1)
    for end in range(start + 1, len(lines)):
        stripped = lines[end].strip()
        if stripped.startswith(fence[0] * 3) and set(stripped) <= {fence[0]} and len(stripped) >= len(fence):
            return lines[:start], "\n".join(lines[start + 1:end]), lines[end + 1:], None
    return lines[:start], "\n".join(lines[start + 1:]), [], "runpod-spec block is not closed (missing ```)"


def add_section(markdown: str, title: str, body: str) -> str:
    """The plan with a `## title` section added after its sections: before the runpod-spec
    block when there is one (text after the spec is its trailer, not a section)."""
    lines = (markdown or "").replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")
    before, spec_text, _, _ = _split_spec(lines)
    section = ["", f"## {title}", "", *body.strip("\n").split("\n"), ""]
    if spec_text is None:
        return "\n".join(lines + section)
    cut = len(before)
    while cut and not before[cut - 1].strip():
        cut -= 1
    return "\n".join(lines[:cut] + section + lines[len(before):])


def redact_plan(markdown: str) -> str:
    """Plan markdown with secrets removed: prose as text, the runpod-spec value by value.

    The spec is JSON: redacting its raw text could cut an escaped quote and break it, so it
    is parsed, redacted per value, and written back only if something was removed.
    """
    text = (markdown or "").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    body, spec_text, trailer, _ = _split_spec(lines)
    if spec_text is None:
        return redact(text)
    start = len(body)  # the fence line; the spec's lines follow it
    end = start + 1 + len(spec_text.split("\n"))  # the closing fence, if there is one
    parts = ([redact("\n".join(body))] if body else []) + [lines[start], redact_json_text(spec_text)]
    parts += lines[end:end + 1]
    if trailer:
        parts.append(redact("\n".join(trailer)))
    return "\n".join(parts)


def parse(markdown: str, *, kind: str = "experiment", account: str | None = None,
          allowed_secrets: list[str] | None = None) -> ParsedPlan:
    """Parse plan markdown into plan_json plus a list of problems, step by step: split off the
    spec block, cut the rest into sections, read the checklist and textboxes, check the spec
    (`allowed_secrets`: see specs.validate)."""
    text = (markdown or "").replace("\r\n", "\n").replace("\r", "\n")
    body_lines, spec_text, trailer_lines, fence_error = _split_spec(text.split("\n"))
    preamble, sections = split_sections(body_lines)
    data: dict = {"preamble": "\n".join(preamble).strip(), "trailer": "\n".join(trailer_lines).strip()}
    section_fields, problems = read_sections(sections)
    data.update(section_fields)
    data["checklist"] = checklist_items(data.get("approval_checklist") or "")
    data["textboxes"], textbox_problems = textbox_keys(text)
    problems += textbox_problems
    spec_fields, spec_problems = _check_spec(spec_text, fence_error, account, allowed_secrets)
    data.update(spec_fields)
    problems += spec_problems
    data["is_blocker"] = kind == "experiment" and spec_text is None
    return ParsedPlan(data, problems)


def split_sections(lines: list[str]) -> tuple[list[str], list[dict]]:
    """The lines before the first known section heading, and each known section with its lines.
    Headings inside code fences are text, not sections."""
    preamble: list[str] = []
    sections: list[dict] = []
    current: dict | None = None
    in_fence = False
    for line in lines:
        if _ANY_FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        found = _section_of(heading.group(2)) if heading else None
        if found:
            title, field = found
            current = {"title": title, "field": field, "lines": []}
            sections.append(current)
            continue
        (current["lines"] if current else preamble).append(line)
    return preamble, sections


def read_sections(sections: list[dict]) -> tuple[dict, list[str]]:
    """Each section's body under its field (the first of a repeated one wins), the sections in
    order, their count, None for every missing one — and the problems: repeats, gaps."""
    problems: list[str] = []
    fields: dict = {"sections": []}
    seen: set[str] = set()
    for section in sections:
        if section["field"] in seen:
            problems.append(f"Section \"{section['title']}\" appears more than once; the first is used.")
            continue
        body = "\n".join(section["lines"]).strip()
        if body and body == GUIDANCE.get(section["field"]):
            continue  # the template's guidance, not written yet: reported missing below
        seen.add(section["field"])
        fields["sections"].append({"title": section["title"], "body_md": body})
        fields[section["field"]] = body
    fields["section_count"] = len(seen - _OPTIONAL_FIELDS)
    for title, field in SECTIONS:
        if field not in seen:
            fields[field] = None
            problems.append(f"Missing section: {title}.")
    return fields, problems


def checklist_items(checklist_md: str) -> list[dict]:
    """`- [ ] label` / `- [x] label` lines of the approval checklist."""
    items = []
    for line in checklist_md.split("\n"):
        item = _CHECK_ITEM.match(line)
        if item:
            items.append({"label": item.group(2).strip(), "checked": item.group(1) != " "})
    return items


def textbox_keys(text: str) -> tuple[list[str], list[str]]:
    """The `[TEXTBOX:key]` keys anywhere in the plan, once each, and the keys refused (not
    kebab-case) as problems."""
    keys: list[str] = []
    problems: list[str] = []
    for line in text.split("\n"):
        box = _TEXTBOX.match(line)
        if box:
            key = box.group(1)
            if not _KEBAB.match(key):
                problems.append(f"Textbox key {key!r} must be kebab-case, e.g. [TEXTBOX:budget-notes].")
            elif key not in keys:
                keys.append(key)
    return keys, problems


def _check_spec(spec_text: str | None, fence_error: str | None, account: str | None,
                allowed_secrets: list[str] | None = None) -> tuple[dict, list[str]]:
    """The plan's spec fields (parsed spec, error, problems, unknown fields) and its problems."""
    fields: dict = {"spec": None, "spec_error": fence_error, "spec_problems": [], "unknown_spec_fields": []}
    if not fence_error and spec_text is not None:
        parsed, error = specs.parse_spec_text(spec_text)
        if error:
            fields["spec_error"] = error
        else:
            check = specs.validate(parsed, account, allowed_secrets)
            fields.update(spec=parsed, spec_problems=check.problems, unknown_spec_fields=check.unknown_fields)
            if check.problems:
                fields["spec_error"] = f"{len(check.problems)} problem(s) in runpod-spec"
    if not fields["spec_error"]:
        return fields, []
    headline = fields["spec_error"] + ("." if fields["spec_problems"] else "")
    return fields, [headline] + fields["spec_problems"]


def spec_is_valid(plan_json: dict) -> bool:
    return not plan_json.get("spec_error")


def render_html(plan_json: dict) -> dict:
    """Add sanitized HTML beside each markdown field, once, when the plan is stored.

    Pages show these `*_html` fields; nothing is sanitized on read.
    """
    rendered = dict(plan_json)
    rendered["preamble_html"] = render_markdown(plan_json.get("preamble"))
    rendered["trailer_html"] = render_markdown(plan_json.get("trailer"))
    rendered["sections"] = [{**section, "body_html": render_markdown(section["body_md"])}
                            for section in plan_json.get("sections", [])]
    rendered["checklist"] = [{**item, "label_html": _inline(render_markdown(item["label"]))}
                             for item in plan_json.get("checklist", [])]
    return rendered


def _inline(html: str) -> str:
    """A one-paragraph rendering without its <p> wrapper (for checklist labels)."""
    html = html.strip()
    if html.startswith("<p>") and html.endswith("</p>") and html.count("<p>") == 1:
        return html[3:-4]
    return html
