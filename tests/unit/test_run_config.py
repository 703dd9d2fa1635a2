"""A run's configuration read from its pod spec's env (services/dispatch/run_config.py)."""
from __future__ import annotations

from services.dispatch import run_config


def test_the_spec_env_becomes_the_runs_configuration():
    """Are the plan's own variables kept, lower-cased, numbers read as numbers, and Sagan's
    and tools' variables left out?"""
    spec = {"env": {"SEED": "3", "LR": "3e-4", "BATCH": "64.0", "CONDITION": "wide", "SAGAN_GIT_COMMIT": "abc",
                    "PYTHONPATH": "/x", "HF_HOME": "/h", "WANDB_MODE": "off", "NOTE": "nan"}}
    assert run_config.from_spec(spec) == {"seed": 3, "lr": 0.0003, "batch": 64.0, "condition": "wide",
                                          "note": "nan"}


def test_a_spec_without_env_has_an_empty_configuration_and_the_run_index_is_always_there():
    """Does a pod without env still group by its run index?"""
    assert run_config.from_spec({}) == {}
    assert run_config.of(None, 4) == {"run": 4}
    assert run_config.of({"config": {"seed": 1}}, 0) == {"run": 0, "seed": 1}
