"""The one redactor: every text Sagan stores passes through here first (SPEC §5.4).

It removes the exact values of configured secrets and anything shaped like a
credential. Lesson from the old system: an agent printed the API token from `.env`
into a tool result and it was shown on the run page.
"""
from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "[REDACTED]"

# Environment variables whose values are secrets wherever they appear.
SECRET_ENV_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASS")
_SECRET_ENV_NAMES = {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"}
_MIN_SECRET_LEN = 8  # shorter values would redact ordinary words

_PATTERNS = [
    # Authorization headers: keep the scheme so the text stays readable.
    (re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)[^\s'\"]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"), r"\1" + REDACTED),
    (re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\bsk_[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\bspt_[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\brpa_[A-Za-z0-9]{16,}"), REDACTED),  # RunPod API keys
    (re.compile(r"\b(hf_[A-Za-z0-9]{20,})"), REDACTED),
    # NAME_TOKEN=value, NAME_KEY: value, export NAME_SECRET="value", apiKey=value.
    # The secret word must be a whole name segment: "monkey=3" or "hotkey=F5" is not a key.
    (re.compile(r"\b((?:[A-Za-z0-9]+_)*"
                r"(?:[A-Z0-9]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)"
                r"|[a-z][A-Za-z0-9]*(?:Token|Key|Secret|Password)"
                r"|(?i:token|key|secret|password|passwd|apikey)))"
                r"(\s*[=:]\s*)(['\"]?)[^\s'\"]+\3"),
     r"\1\2\3" + REDACTED + r"\3"),
    # credentials inside URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1" + REDACTED + "@"),
]


def configured_secret_values() -> list[str]:
    """Exact values of secrets in the environment, longest first."""
    values = set()
    for name, value in os.environ.items():
        if not value or len(value) < _MIN_SECRET_LEN:
            continue
        if name in _SECRET_ENV_NAMES or name.endswith(SECRET_ENV_SUFFIXES):
            values.add(value)
    return sorted(values, key=len, reverse=True)


def redact(text: str | None, extra_secrets: list[str] | None = None) -> str | None:
    """Return `text` with every known secret value and credential pattern removed."""
    if not text:
        return text
    for value in configured_secret_values() + list(extra_secrets or []):
        if value and value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_data(value: Any) -> Any:
    """Redact every string inside a JSON-like structure (keys and values)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value
