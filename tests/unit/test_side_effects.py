"""The one table of after-move actions (services/pipeline/side_effects.py), checked without a database."""
from __future__ import annotations

import inspect

import pytest

from services.pipeline import side_effects
from services.workflow import lifecycle


def test_every_side_effect_in_the_transition_table_has_a_handler():
    """Does every side effect the table of moves names have a function that carries it out?"""
    assert side_effects.missing_handlers() == []


def test_start_up_fails_when_a_move_names_an_unhandled_side_effect(monkeypatch):
    """Does install() (create_app) refuse to start, naming the gap and changing nothing?"""
    monkeypatch.setattr(lifecycle, "TRANSITIONS",
                        lifecycle.TRANSITIONS + [lifecycle._rule(["running"], ["uploading"], ["system"],
                                                                 "collect_artifacts")])
    before = dict(lifecycle.SIDE_EFFECT_HOOKS)
    with pytest.raises(RuntimeError, match="collect_artifacts"):
        side_effects.install()
    assert lifecycle.SIDE_EFFECT_HOOKS == before


def test_handlers_and_guards_take_what_lifecycle_passes():
    """Does every handler take (experiment_id, actor, metadata) and every guard
    (experiment, to, actor, metadata), as lifecycle calls them?"""
    for name, handlers in side_effects.HANDLERS.items():
        for handler in handlers:
            assert len(inspect.signature(handler).parameters) == 3, (name, handler)
    guard_names = {rule.guard for rule in lifecycle.TRANSITIONS if rule.guard}
    for name, guards in side_effects.GUARDS.items():
        assert name in side_effects.HANDLERS or name in guard_names, name
        for guard in guards:
            assert len(inspect.signature(guard).parameters) == 4, (name, guard)


def test_install_gives_lifecycle_exactly_the_table():
    """After install(), does lifecycle run the table's handlers, in the table's order?"""
    side_effects.install()
    assert lifecycle.SIDE_EFFECT_HOOKS == {name: list(h) for name, h in side_effects.HANDLERS.items()}
    assert lifecycle.GUARDS == {name: list(g) for name, g in side_effects.GUARDS.items()}
