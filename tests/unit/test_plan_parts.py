"""The plan parser's steps (services.planning.plans): sections, checklist and textboxes, no database."""
from __future__ import annotations

from services.planning import plans


def test_sections_start_at_known_headings_outside_code_fences():
    """Is text before the first known heading the preamble, and a heading inside a fence text?"""
    lines = ["Intro", "## Goal", "Find out.", "```", "## Hypothesis", "```", "# Risks and Red Team", "None."]
    preamble, sections = plans.split_sections(lines)
    assert preamble == ["Intro"]
    assert [(s["title"], s["field"]) for s in sections] == [("Goal", "goal"), ("Risks and Red Team", "risks")]
    assert sections[0]["lines"] == ["Find out.", "```", "## Hypothesis", "```"]


def test_a_repeated_section_keeps_the_first_and_missing_ones_are_named():
    """Is the first of two Goal sections used, and every absent section reported and None?"""
    _, sections = plans.split_sections(["## Goal", "first", "## Goal", "second"])
    fields, problems = plans.read_sections(sections)
    assert fields["goal"] == "first" and fields["section_count"] == 1
    assert fields["sections"] == [{"title": "Goal", "body_md": "first"}]
    assert problems[0] == 'Section "Goal" appears more than once; the first is used.'
    assert problems[1:] == [f"Missing section: {title}." for title, field in plans.SECTIONS if field != "goal"]
    assert all(fields[field] is None for _, field in plans.SECTIONS if field != "goal")


def test_checklist_items_and_their_state():
    """Are `- [ ]` and `- [x]` lines read as unchecked and checked items, other lines ignored?"""
    assert plans.checklist_items("- [ ] Budget ok\n* [x] Seeds fixed\nnot an item\n- [] broken") == [
        {"label": "Budget ok", "checked": False}, {"label": "Seeds fixed", "checked": True}]


def test_textbox_keys_once_each_and_bad_keys_refused():
    """Are textbox keys collected once, and a key that is not kebab-case a problem?"""
    keys, problems = plans.textbox_keys("[TEXTBOX:budget-notes]\ntext\n[TEXTBOX:budget-notes]\n[TEXTBOX:Bad_Key]")
    assert keys == ["budget-notes"]
    assert problems == ["Textbox key 'Bad_Key' must be kebab-case, e.g. [TEXTBOX:budget-notes]."]
