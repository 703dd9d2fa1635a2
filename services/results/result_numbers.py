"""The numbers of a clean result's TL;DR, and whether each one is in the evidence.

Used by the completion audit (services.results.completion_audit; the rule is explained in
docs/agents.md). A number is read the way a person writes it and matched the way a person
rounds:

- read: integers, decimals, thousands separators (12,345), scientific notation (1.2e-3,
  3 × 10^-4), percentages (93 %), k/M/B suffixes, and each side of a range (0.90–0.94,
  0.90-0.94) or an interval (0.93 ± 0.02). A minus sign counts only where it is one (at the
  start, after a space or a bracket), not in a range or an identifier;
- not read: figures that are part of a name or a reference (RTX4090, GPT-4, seed-1, v1.2.3,
  #123, 3rd), ISO dates, and anything inside <code> (commit hashes, commands);
- matched: a number shown with d decimals stands for anything that rounds to it, so 0.93
  matches 0.9312 and 0.925 but not 0.9351 (within half a unit of its last digit); 93 %
  matches 93.12 or 0.9312; 0.93 matches a "93.1 %" in the evidence; a sign is not
  required to match (a TL;DR says "dropped by 3.2" where a table holds -3.2).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from services.core.sanitize import local_name

_NUMBER = re.compile(r"""
    (?P<sign>[-−+])?
    (?P<digits>(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)
    (?:[eE](?P<exp>[-+−]?\d+)|\s?[×x]\s?10\^?(?P<exp10>[-+−]?\d+))?
    (?P<pct>\s?%)?
    (?P<suffix>[kKMB](?![A-Za-z]))?
""", re.X)
_ORDINAL = re.compile(r"(st|nd|rd|th)(?![A-Za-z])")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b")
_MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9}
# In the evidence every number counts, identifiers included: a JSON key "acc@1" holds data too.
_SOURCE_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(\s?%)?")
# 12,345 in a text output is also twelve thousand (a CSV's commas are read apart as well).
_SOURCE_THOUSANDS = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
SOURCE_NUMBERS_MAX = 2_000_000  # numbers read from the evidence, in all


@dataclass(frozen=True)
class Claim:
    """A number as the TL;DR shows it: its text, value, the half-width rounding allows, and
    whether it is a percentage."""
    text: str
    value: float
    tolerance: float
    percent: bool = False


def claims(text: str) -> list[Claim]:
    """Every number a reader sees in `text`, in order (see the module's rules)."""
    text = _ISO_DATE.sub(" ", text.replace("\u2212", "-"))
    found = []
    for match in _NUMBER.finditer(text):
        start, end = match.start(), match.end()
        before = text[start - 1] if start else " "
        sign = match.group("sign") or ""
        if sign:
            ahead = text[start - 1] if start else " "
            if ahead.isalpha() or ahead == "_":
                continue  # seed-1, GPT-4: part of a name
            if ahead.isdigit() or ahead in ")]":
                sign = ""  # 0.90-0.94: a range, not a negative number
        elif before.isalnum() or before in "_.#/@$":
            continue  # RTX4090, v1.2, #123
        after = text[end:end + 3]
        if (after[:1] == "." and after[1:2].isdigit()) or _ORDINAL.match(after):
            continue  # 1.2.3 (a version), 3rd
        found.append(_claim(match, sign))
    return found


def _claim(match: re.Match, sign: str) -> Claim:
    digits = match.group("digits").replace(",", "")
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    exponent = int((match.group("exp") or match.group("exp10") or "0").replace("−", "-"))
    scale = 10.0 ** exponent * _MULTIPLIERS.get(match.group("suffix") or "", 1.0)
    value = float(digits) * scale * (-1 if sign == "-" else 1)
    quantum = 10.0 ** -decimals * scale
    shown = match.group(0).strip()
    if not sign and shown[:1] in "-−+":
        shown = shown[1:]  # the range's dash, not the number's
    return Claim(shown, value, quantum * 0.5000001, bool(match.group("pct")))


class Evidence:
    """The numbers of the artifacts and analysis outputs, sorted, for lookups by value."""

    def __init__(self):
        self._plain: list[float] = []
        self._percent: list[float] = []
        self._sorted = True

    def add(self, text: str) -> None:
        for match in _SOURCE_NUMBER.finditer(text):
            if len(self._plain) + len(self._percent) >= SOURCE_NUMBERS_MAX:
                return
            raw = match.group(0).rstrip("% ").strip()
            try:
                value = abs(float(raw))
            except ValueError:
                continue
            (self._percent if match.group(1) else self._plain).append(value)
        for match in _SOURCE_THOUSANDS.finditer(text):
            self._plain.append(float(match.group(0).replace(",", "")))
        self._sorted = False

    def __len__(self) -> int:
        return len(self._plain) + len(self._percent)

    def _sort(self) -> None:
        if not self._sorted:
            self._plain.sort()
            self._percent.sort()
            self._sorted = True

    @staticmethod
    def _within(values: list[float], target: float, tolerance: float) -> bool:
        at = bisect.bisect_left(values, target - tolerance)
        return at < len(values) and values[at] <= target + tolerance

    def holds(self, claim: Claim) -> bool:
        """Is there a number in the evidence that `claim` is a rounding of?"""
        self._sort()
        value = abs(claim.value)
        if self._within(self._plain, value, claim.tolerance) or self._within(self._percent, value, claim.tolerance):
            return True
        if claim.percent:  # 93 % ↔ 0.93 in a JSON file
            return self._within(self._plain, value / 100, claim.tolerance / 100)
        # 0.93 ↔ "93.1 %" in a text output
        return self._within(self._percent, value * 100, claim.tolerance * 100)


def text_without_code(element) -> str:
    """An element's text, leaving out what sits in <code> (hashes, commands), whitespace collapsed."""
    parts: list[str] = []

    def walk(node) -> None:
        if isinstance(node.tag, str) and local_name(node.tag) == "code":
            parts.append(" ")
        else:
            parts.append(node.text or "")
            for child in node:
                walk(child)
        parts.append(node.tail or "" if node is not element else "")
    walk(element)
    return " ".join("".join(parts).split())
