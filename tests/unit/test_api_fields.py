"""The API's one camelCase ⇔ snake_case mapping (blueprints/api/_common.py), without a database."""
from __future__ import annotations

import pytest

from blueprints.api._common import api_name, fields_of, snake_name
from services.core.errors import ValidationError


@pytest.mark.parametrize("emitted, service", [
    ("podAccount", "pod_account"), ("cacheCreationInputTokens", "cache_creation_input_tokens"),
    ("sha256", "sha256"), ("id", "id"), ("costPerHr", "cost_per_hr"), ("gpuTypeId", "gpu_type_id"),
])
def test_the_two_spellings_are_one_mapping_apart(emitted, service):
    """Does each emitted name map to the service's name and back to itself?"""
    assert snake_name(emitted) == service
    assert api_name(service) == emitted


def test_accepted_fields_take_either_spelling():
    """Are camelCase fields the endpoint accepts renamed, and everything else left as sent?"""
    body = {"podAccount": "team", "git_branch": "exp/1", "runpodAcount": "typo", "createdAt": "x", 7: "odd"}
    assert fields_of(body, {"pod_account", "git_branch"}) == {
        "pod_account": "team", "git_branch": "exp/1", "runpodAcount": "typo", "createdAt": "x", 7: "odd"}


def test_both_spellings_must_agree_in_value_and_type():
    """Is one field given twice with different values (or types) refused, and the same value accepted?"""
    assert fields_of({"toStatus": "testing", "to_status": "testing"}, {"to_status"}) == {"to_status": "testing"}
    for first, second in (("testing", "shared"), (1, True), (1, 1.0), (1, "1")):
        with pytest.raises(ValidationError) as refused:
            fields_of({"toStatus": first, "to_status": second}, {"to_status"})
        assert refused.value.code == "conflicting_fields" and refused.value.field == "to_status"
        assert "toStatus and to_status" in refused.value.message
