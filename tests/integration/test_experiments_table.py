"""The experiments table `/experiments` (SPEC §9.1): sortable, filterable, paged; bad
query values are ignored, never a 500."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest

from services.core import clock
from tests.integration.pages import table_numbers, text


@pytest.fixture
def four(make_experiment):
    """Four experiments with distinct titles, priorities, kinds and statuses, updated in order."""
    made = {}
    for key, title, priority, kind, status in [
        ("alpha", "Alpha probe", "low", "experiment", None),
        ("charlie", "Charlie survey", "urgent", "survey", "clarifying"),
        ("bravo", "Bravo sweep", "normal", "experiment", "blocked"),
        ("delta", "Delta harness", "high", "infra", "archived"),
    ]:
        clock.advance(timedelta(minutes=1))
        made[key] = make_experiment(title, priority=priority, kind=kind, status=status)
    return made


@pytest.mark.parametrize("sort, direction, order", [
    ("number", "desc", ["delta", "bravo", "charlie", "alpha"]),
    ("number", "asc", ["alpha", "charlie", "bravo", "delta"]),
    ("title", "asc", ["alpha", "bravo", "charlie", "delta"]),
    ("title", "desc", ["delta", "charlie", "bravo", "alpha"]),
    ("status", "asc", ["delta", "bravo", "charlie", "alpha"]),   # archived, blocked, clarifying, proposed
    ("status", "desc", ["alpha", "charlie", "bravo", "delta"]),
    ("priority", "asc", ["alpha", "bravo", "delta", "charlie"]),  # low, normal, high, urgent
    ("priority", "desc", ["charlie", "delta", "bravo", "alpha"]),
    ("updated", "asc", ["alpha", "charlie", "bravo", "delta"]),
    ("updated", "desc", ["delta", "bravo", "charlie", "alpha"]),
])
def test_table_sorts_by_each_column(client, owner, four, sort, direction, order):
    """Does sorting by number/title/status/priority/updated, up or down, order the rows?"""
    response = client.get(f"/experiments?sort={sort}&dir={direction}")
    assert response.status_code == 200
    assert table_numbers(response) == [four[key] for key in order]


def test_default_order_is_newest_number_first(client, owner, four):
    """Without a sort, are the newest experiments first?"""
    assert table_numbers(client.get("/experiments")) == [four[k] for k in ("delta", "bravo", "charlie", "alpha")]


@pytest.mark.parametrize("query, expected", [
    ("status=blocked", ["bravo"]),
    ("kind=survey", ["charlie"]),
    ("kind=experiment", ["bravo", "alpha"]),
    ("priority=urgent", ["charlie"]),
    ("q=harness", ["delta"]),
    ("q=%23{alpha}", ["alpha"]),
    ("status=archived&kind=infra", ["delta"]),
    ("status=archived&kind=survey", []),
])
def test_table_filters(client, owner, four, query, expected):
    """Do the status / kind / priority / text filters narrow the table?"""
    response = client.get("/experiments?" + query.format(**four))
    assert table_numbers(response) == [four[key] for key in expected]
    if not expected:
        assert "No experiments match." in text(response)


def test_table_rows_show_status_and_turn(client, owner, four):
    """Does each row show the status chip and the turn text?"""
    body = text(client.get("/experiments?status=blocked"))
    assert "status-blocked" in body
    assert "Owner turn: unblock or revise" in body


@pytest.mark.parametrize("query", [
    "status=bogus", "kind=poem", "priority=asap", "sort=evil", "dir=sideways", "page=abc",
    "page=-3", "page=0", "sort=number;DROP TABLE experiments", "turn=nobody", "q=%25%25",
    "status=", "page=1.5",
])
def test_bad_query_values_are_ignored(client, owner, four, query):
    """Is an unknown filter, sort or page value ignored (the default table shown), never an error?"""
    response = client.get(f"/experiments?{query}")
    assert response.status_code == 200
    if query.startswith("q="):
        assert table_numbers(response) == []
    else:
        assert sorted(table_numbers(response)) == sorted(four.values())


def test_absurd_page_numbers_show_the_last_page(client, owner, four):
    """Does a page number far beyond the end (even beyond 64 bits) show the last page, not a 500?"""
    for page in ("999", "9" * 25):
        response = client.get(f"/experiments?page={page}")
        assert response.status_code == 200, page
        assert sorted(table_numbers(response)) == sorted(four.values())


def test_table_pages_fifty_rows_at_a_time(app, client, owner, make_experiment):
    """With 55 experiments, does page 1 list 50 (newest first) and page 2 the other 5?"""
    numbers = [make_experiment(f"Paged {i}") for i in range(55)]
    first = client.get("/experiments")
    assert table_numbers(first) == sorted(numbers, reverse=True)[:50]
    assert "Page 1 of 2" in text(first)
    assert "55 experiments" in text(first)
    second = client.get("/experiments?page=2")
    assert table_numbers(second) == sorted(numbers, reverse=True)[50:]
    assert "Page 2 of 2" in text(second)


def test_paging_links_keep_filters_and_sort(app, client, owner, make_experiment):
    """Do the pager links carry the current sort and filters along?"""
    for i in range(55):
        make_experiment(f"Paged {i}", kind="survey")
    body = text(client.get("/experiments?kind=survey&sort=title&dir=asc"))
    link = next(href for href in re.findall(r'href="([^"]*page=2[^"]*)"', body))
    assert "kind=survey" in link and "sort=title" in link and "dir=asc" in link


def test_htmx_gets_only_the_table_fragment(htmx_client, four):
    """Does an htmx filter request get only the #experiments-table fragment?"""
    response = htmx_client.get("/experiments?status=blocked")
    assert "<html" not in response.text
    assert 'id="experiments-table"' in response.text.split(">", 1)[0]
    assert table_numbers(response) == [four["bravo"]]
