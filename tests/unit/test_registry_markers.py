"""The timeline's marker groups: every marker in exactly one group, each group in words."""
from services.core import registry


def test_every_marker_is_in_exactly_one_group():
    """Is each known marker offered by one group of the timeline filter (none lost, none twice)?"""
    grouped = [marker for _label, markers in registry.MARKER_GROUPS.values() for marker in markers]
    assert sorted(grouped) == sorted(registry.MARKERS)


def test_a_filter_value_selects_a_group_or_one_named_marker_and_nothing_else():
    """Does a group key select its markers, an exact marker itself, and an unknown value none?"""
    assert "epm:code-review-codex" in registry.markers_matching("code")
    assert registry.markers_matching("epm:plan") == ("epm:plan",)
    assert registry.markers_matching("epm:launch-rockets") == () and registry.markers_matching(None) == ()
