"""Experiment field cleaning (services.workflow.experiments.clean_fields), with the limits passed in: no
app and no database."""
from __future__ import annotations

import pytest

from services.core.errors import ValidationError
from services.workflow.experiments import EDITABLE_FIELDS, FIELD_CLEANERS, clean_fields

LIMITS = {"TITLE_MAX": 20, "HYPOTHESIS_MAX": 30, "TAG_MAX_CHARS": 8, "TAGS_MAX": 3}


def clean(data, **kwargs):
    return clean_fields(data, limits=LIMITS, **kwargs)


def test_every_editable_field_has_a_cleaner():
    """Is each editable field cleaned (none accepted and silently dropped)?"""
    assert {name for name, _ in FIELD_CLEANERS} == set(EDITABLE_FIELDS)


def test_a_create_needs_a_title_and_an_edit_does_not():
    """Is a title required when creating, and left alone by an edit that does not send one?"""
    with pytest.raises(ValidationError, match="Title is required"):
        clean({"hypothesis": "x"})
    assert clean({"hypothesis": "  x  "}, partial=True) == {"hypothesis": "x"}


def test_fields_are_normalised():
    """Are titles squeezed, empty text made None, tags trimmed and de-duplicated, caps numbers?"""
    assert clean({"title": "  Two   seeds ", "hypothesis": "  ", "tags": " a, b ,a,,", "cost_cap_usd": "12.5",
                  "compute_size": "", "git_branch": " main "}) == {
        "title": "Two seeds", "hypothesis": None, "tags": ["a", "b"], "cost_cap_usd": 12.5,
        "compute_size": None, "git_branch": "main"}


def test_an_empty_choice_keeps_the_current_value():
    """Does an empty kind/priority leave the field out rather than clearing it?"""
    assert clean({"kind": "", "priority": None}, partial=True) == {}


@pytest.mark.parametrize("data, field, message", [
    ({"title": "x" * 21}, "title", "limit is 20"),
    ({"title": 5}, "title", "Title is required"),
    ({"hypothesis": 3}, "hypothesis", "must be text"),
    ({"hypothesis": "y" * 31}, "hypothesis", "limit is 30"),
    ({"kind": "bogus"}, "kind", "Kind must be one of"),
    ({"pod_account": "mine"}, "pod_account", "Pod account must be one of"),
    ({"compute_size": "huge"}, "compute_size", "Compute size must be one of"),
    ({"tags": ["ok", 3]}, "tags", "list of strings"),
    ({"tags": "longer-than-8"}, "tags", "longer than 8"),
    ({"tags": "a,b,c,d"}, "tags", "At most 3"),
    ({"cost_cap_usd": "lots"}, "cost_cap_usd", "number of dollars"),
    ({"cost_cap_usd": -1}, "cost_cap_usd", "between 0 and"),
    ({"git_branch": "has space"}, "git_branch", "Git branch is not valid"),
    ({"git_commit": "a" * 65}, "git_commit", "Git commit is not valid"),
    ({"podAccount": "team"}, "podAccount", "Unknown field"),
])
def test_each_bad_field_is_refused_by_name(data, field, message):
    """Is each bad value refused with a message naming the field?"""
    with pytest.raises(ValidationError, match=message) as refused:
        clean(data, partial=True)
    assert refused.value.field == field


def test_the_first_problem_in_table_order_is_reported():
    """With two bad fields, is the one earlier in the table reported (as before the split)?"""
    with pytest.raises(ValidationError) as refused:
        clean({"git_commit": "a b", "kind": "bogus"}, partial=True)
    assert refused.value.field == "kind"
