"""How an old-Sagan document maps to our rows (services.planning.importer), without a database."""
from __future__ import annotations

import uuid

import pytest

from services.core.errors import ValidationError
from services.planning import importer

EXP_ID = uuid.UUID("5b0c5c2e-6f0c-4b5e-9a53-0f5d2f4b7d11")


@pytest.mark.parametrize("old, message", [
    ({"id": "nope", "number": 1, "status": "proposed"}, "has no valid id"),
    ({"id": str(EXP_ID), "number": "twelve", "status": "proposed"}, "no valid number"),
    ({"id": str(EXP_ID), "number": 12, "status": "dreaming"}, "unknown status 'dreaming'"),
])
def test_an_experiment_without_a_valid_identity_is_refused(old, message):
    """Is a bad id, number or status refused with a message saying which?"""
    with pytest.raises(ValidationError, match=message):
        importer.experiment_identity(old)


def test_experiment_fields_fall_back_and_clip():
    """Do unknown choices take defaults, and titles and tags get squeezed and clipped?"""
    fields = importer.experiment_fields({"title": "  An   old  one ", "kind": "??", "runpodAccount": "x",
                                         "priority": "urgent!", "tags": ["t" * 100] + ["x"] * 60,
                                         "createdAt": "2025-03-01T10:00:00Z"}, EXP_ID, 12, "running")
    assert fields["title"] == "An old one" and fields["status"] == "running"
    assert (fields["kind"], fields["pod_account"], fields["priority"], fields["assignee_kind"]) == \
        ("experiment", "team", "normal", "agent")
    assert len(fields["tags"]) == 50 and fields["tags"][0] == "t" * 80
    assert fields["created_at"].isoformat() == "2025-03-01T10:00:00+00:00" == fields["updated_at"].isoformat()
    assert fields["plan_json"] is None and fields["body"] is None
    assert importer.experiment_fields({}, EXP_ID, 12, "proposed")["title"] == "Imported experiment #12"


def test_old_event_types_are_mapped_and_remembered():
    """Is a status-less state change a note, an unknown type a note, both keeping the old type?"""
    base = {"id": str(uuid.uuid4()), "createdAt": "2025-03-01T10:00:00Z"}
    statusless = importer.event_fields({**base, "eventType": "state_changed", "note": "fyi"}, EXP_ID)
    assert (statusless["event_type"], statusless["metadata_"]) == ("note", {"legacy_event_type": "state_changed"})
    unknown = importer.event_fields({**base, "eventType": "runpod_status", "metadata": 3}, EXP_ID)
    assert (unknown["event_type"], unknown["metadata_"]) == ("note", {"value": 3, "legacy_event_type": "runpod_status"})
    marker = importer.event_fields({**base, "eventType": "marker", "marker": "epm:clarify", "actorKind": "robot"},
                                   EXP_ID)
    assert (marker["marker"], marker["actor_kind"], marker["entity_id"]) == ("epm:clarify", "system", EXP_ID)


def test_approval_requests_take_the_old_systems_defaults():
    """Does a bare old approval request become a pending plan approval titled after the experiment?"""
    fields = importer.approval_fields({"id": str(uuid.uuid4()), "status": "maybe"}, EXP_ID, "Seeds")
    assert (fields["kind"], fields["status"], fields["title"]) == ("experiment_plan", "pending",
                                                                   "Approve experiment plan: Seeds")
    assert (fields["requested_state"], fields["approved_state"], fields["rejected_state"]) == \
        ("plan_pending", "approved", "planning")
    with pytest.raises(ValidationError, match="An approval request has no valid id"):
        importer.approval_fields({"id": None}, EXP_ID, "Seeds")
