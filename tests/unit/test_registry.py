"""The one status registry (SPEC §2.1, §2.4): statuses, turn texts, terminal set, columns."""
from __future__ import annotations

import pytest

from services.core import registry

# SPEC §2.1, copied by hand from the table so a drift in the registry shows up here.
SPEC_TURNS = {
    "proposed": "Sagan turn: clarify scope",
    "clarifying": "Sagan turn: clarify hypothesis and information gain",
    "awaiting_clarifications": "Owner turn: answer Sagan questions",
    "gate_pending": "Owner turn: resolve gate",
    "planning": "Sagan turn: draft plan",
    "plan_pending": "Owner turn: approve, defer, or reject",
    "awaiting_approval": "Owner turn: approve, defer, or reject",
    **{s: "Sagan turn: run and verify" for s in (
        "approved", "queued", "implementing", "code_reviewing", "testing", "running",
        "uploading", "verifying", "interpreting", "clean_result_drafting", "followups_running")},
    "reviewing": "Owner turn: review interpretation and propose follow-ups",
    "awaiting_promotion": "Owner turn: promote clean result",
    "blocked": "Owner turn: unblock or revise",
    **{s: "No active owner action" for s in (
        "shared", "completed", "done_experiment", "done_impl", "failed", "cancelled", "archived")},
}

SPEC_TERMINAL = {"completed", "done_experiment", "done_impl", "failed", "cancelled", "archived", "shared"}

# SPEC §2.4: column title → statuses, in display order.
SPEC_COLUMNS = [
    ("Ideas", {"proposed"}),
    ("Clarifying", {"clarifying", "awaiting_clarifications", "gate_pending"}),
    ("Planning", {"planning"}),
    ("Awaiting approval", {"plan_pending", "awaiting_approval"}),
    ("Implementing", {"approved", "queued", "implementing", "code_reviewing", "testing"}),
    ("Running", {"running", "uploading", "verifying"}),
    ("Analysis", {"interpreting", "clean_result_drafting", "reviewing", "followups_running"}),
    ("Awaiting promotion", {"awaiting_promotion"}),
    ("Blocked", {"blocked"}),
    ("Done", {"shared", "completed", "done_experiment", "done_impl"}),
    ("Archived / cancelled / failed", {"archived", "cancelled", "failed"}),
]


def test_there_are_exactly_28_unique_statuses():
    """Does the registry hold the 28 statuses of SPEC §2.1, each once?"""
    assert len(registry.STATUSES) == 28
    assert len(set(registry.STATUS_NAMES)) == 28
    assert set(registry.STATUS_NAMES) == set(SPEC_TURNS)


@pytest.mark.parametrize("status, turn", sorted(SPEC_TURNS.items()))
def test_turn_text_matches_spec_exactly(status, turn):
    """Is each status's turn text exactly the one in the SPEC §2.1 table?"""
    assert registry.turn_for(status) == turn
    assert registry.STATUS_BY_NAME[status].turn == turn


def test_terminal_statuses_match_spec():
    """Are exactly the seven SPEC terminal statuses marked terminal?"""
    assert registry.TERMINAL_STATUSES == SPEC_TERMINAL
    assert registry.NON_TERMINAL_STATUSES == set(SPEC_TURNS) - SPEC_TERMINAL


def test_owner_turn_statuses_are_the_owner_turn_texts():
    """Are the owner-turn statuses exactly those whose turn text starts with "Owner turn"?"""
    expected = {s for s, turn in SPEC_TURNS.items() if turn.startswith("Owner turn")}
    assert registry.OWNER_TURN_STATUSES == expected
    assert expected == {"awaiting_clarifications", "gate_pending", "plan_pending",
                        "awaiting_approval", "reviewing", "awaiting_promotion", "blocked"}


def test_board_columns_in_spec_order_with_spec_groups():
    """Do the board columns come in SPEC §2.4 order, each holding the SPEC's statuses?"""
    titles = [title for _key, title in registry.BOARD_COLUMNS]
    assert titles == [title for title, _ in SPEC_COLUMNS]
    for (key, title), (_spec_title, statuses) in zip(registry.BOARD_COLUMNS, SPEC_COLUMNS):
        assert set(registry.statuses_in_column(key)) == statuses, title


def test_every_status_is_in_exactly_one_column():
    """Does each status belong to exactly one board column?"""
    keys = [key for key, _ in registry.BOARD_COLUMNS]
    placed = [s for key in keys for s in registry.statuses_in_column(key)]
    assert sorted(placed) == sorted(registry.STATUS_NAMES)


def test_only_the_closed_column_is_collapsed():
    """Is only Archived/Cancelled/Failed collapsed on the board?"""
    assert registry.COLLAPSED_COLUMNS == {"closed"}
    assert dict(registry.BOARD_COLUMNS)["closed"].startswith("Archived")
