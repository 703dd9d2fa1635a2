"""How the completion audit reads a TL;DR's numbers and finds them in the evidence
(services.results.result_numbers): read as a person writes them, matched as a person rounds."""
from __future__ import annotations

import pytest

from services.core.sanitize import parse_fragment
from services.results.result_numbers import Evidence, claims, text_without_code


def shown(text: str) -> list[str]:
    return [c.text for c in claims(text)]


def values(text: str) -> list[float]:
    return [c.value for c in claims(text)]


def test_plain_numbers_decimals_percentages_and_thousands():
    """Integers, decimals, percentages and thousands separators are read with their value."""
    assert values("8 epochs reached 0.912 accuracy on 12,345 samples (93.1% of them)") == [8, 0.912, 12345, 93.1]
    assert [c.percent for c in claims("93.1 % and 0.93")] == [True, False]


def test_scientific_notation_suffixes_and_signs():
    """1.2e-3, 3 × 10^-4, 12k, a leading minus (also the typographic one) are values; a range's dash is not a sign."""
    assert values("lr 1.2e-3, 3 × 10^-4, 12k steps, loss −0.5 and -2") == pytest.approx([0.0012, 0.0003, 12000, -0.5, -2])
    assert values("between 0.90-0.94 (0.90–0.94)") == [0.9, 0.94, 0.9, 0.94]
    assert shown("0.90-0.94") == ["0.90", "0.94"]


def test_intervals_give_both_numbers():
    """0.93 ± 0.02: the estimate and its half-width are both numbers to find."""
    assert values("accuracy 0.93 ± 0.02") == [0.93, 0.02]


def test_names_references_versions_dates_and_ordinals_are_not_numbers():
    """RTX4090, GPT-4, seed-1, #123, v1.2.3, an ISO date and 3rd carry no result."""
    assert claims("RTX4090 GPT-4 seed-1 #123 v1.2.3 on 2026-12-02 for the 3rd time") == []


def test_code_is_left_out_of_the_text():
    """Numbers inside <code> (a commit hash, a command) are not read."""
    item = parse_fragment("<li>Ran <code>3f2a91c 1234567</code> at lr 0.01</li>")[0]
    assert text_without_code(item) == "Ran at lr 0.01"


@pytest.mark.parametrize("claim, evidence, found", [
    ("0.93", "0.9312", True),        # rounded to the shown precision
    ("0.93", "0.925", True),         # half a unit of the last digit, either way
    ("0.93", "0.9351", False),       # that rounds to 0.94
    ("0.930", "0.9312", False),      # three decimals shown: 0.9312 is 0.931
    ("93%", "0.9312", True),         # a percentage of a fraction
    ("93.1%", "93.12", True),
    ("0.93", "accuracy 93.1 %", True),  # a fraction of a printed percentage
    ("12,345", "n=12345", True),
    ("12,345", "12,345 rows", True),
    ("1.2e-3", "0.00118", True),
    ("1.2e-3", "0.0013", False),
    ("3.2", "delta -3.2", True),     # a magnitude matches a signed value
    ("8", "7.6", True),
    ("8", "7.4", False),
])
def test_a_claim_matches_what_rounds_to_it(claim, evidence, found):
    """A number shown with d decimals stands for anything within half a unit of its last digit."""
    pool = Evidence()
    pool.add(evidence)
    assert pool.holds(claims(claim)[0]) is found


def test_evidence_reads_json_and_csv():
    """Numbers in JSON and CSV are all read, keys with digits included."""
    pool = Evidence()
    pool.add('{"seed": 1, "accuracy": 0.9312, "acc@5": 0.99}\nstep,loss\n1,2.5e-1\n')
    assert pool.holds(claims("0.25")[0]) and pool.holds(claims("0.99")[0]) and len(pool) >= 6
