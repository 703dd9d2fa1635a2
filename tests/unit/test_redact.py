"""The one redactor (SPEC §5.4): credential shapes and configured secret values go."""
from __future__ import annotations

import pytest

from services.redact import REDACTED, redact, redact_data


@pytest.mark.parametrize("secret", [
    "sk_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV",          # Sagan API token
    "spt_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2",                 # Sagan pod token
    "sk-ant-api03-" + "Abc123_def456-GHI789jklMNO",       # Anthropic key
    "rpa_" + "ABCDEFGHIJ0123456789KLMNOPQRSTUV",         # RunPod key
])
def test_token_shapes_are_removed(secret):
    """Does a token-shaped string vanish from text, leaving the words around it?"""
    text = f"The agent printed {secret} into the tool result."
    cleaned = redact(text)
    assert secret not in cleaned
    assert cleaned == f"The agent printed {REDACTED} into the tool result."


def test_authorization_bearer_header_is_removed():
    """Is the credential of an `Authorization: Bearer …` header removed, the header name kept?"""
    text = "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig' https://api.example"
    cleaned = redact(text)
    assert "eyJhbGciOiJIUzI1NiJ9" not in cleaned
    assert "Authorization: Bearer " + REDACTED in cleaned


@pytest.mark.parametrize("line, name", [
    ("X_TOKEN=abcdef123456", "X_TOKEN"),
    ("export RUNPOD_API_KEY=\"qwertyuiop1234\"", "RUNPOD_API_KEY"),
    ("HF_SECRET: s3cr3t-value-here", "HF_SECRET"),
    ("DB_PASSWORD=correcthorse", "DB_PASSWORD"),
    ("openai api_key=lowercase-secret-99", "api_key"),
    ("const apiKey=camelCaseSecret42;", "apiKey"),
])
def test_secret_assignments_are_removed(line, name):
    """Is the value of a *_TOKEN= / *_KEY= / *_SECRET= / *_PASSWORD= assignment removed?"""
    cleaned = redact(line)
    value = line.split("=", 1)[-1] if "=" in line else line.split(":", 1)[-1]
    assert value.strip().strip('"') not in cleaned
    assert name in cleaned and REDACTED in cleaned


def test_exact_configured_secret_values_are_removed(monkeypatch):
    """Is the exact value of a secret in the environment removed wherever it appears?"""
    monkeypatch.setenv("SAGAN_TEST_WEBHOOK_TOKEN", "zebra-47-orchard-lantern")
    cleaned = redact("posting to hooks with zebra-47-orchard-lantern as the signature")
    assert "zebra-47-orchard-lantern" not in cleaned
    assert cleaned == f"posting to hooks with {REDACTED} as the signature"


def test_credentials_inside_urls_are_removed():
    """Is the password of scheme://user:password@host removed?"""
    cleaned = redact("connect to postgresql://sagan:hunter2hunter2@db.internal:5432/sagan")
    assert "hunter2hunter2" not in cleaned
    assert "db.internal:5432/sagan" in cleaned


@pytest.mark.parametrize("text", [
    "Loss fell from 2.31 to 1.87 after 4k warmup steps (seed 7).",
    "Ask the monkey=banana question; hotkey=F5 reloads the page.",
    "The sk learning rate schedule and the spt baseline both converged.",
    "Use max_tokens: 4096 and temperature=0.7 for the planner.",
    "Bearer bonds are not part of this survey.",
    "",
])
def test_ordinary_text_is_left_alone(text):
    """Does text without credentials come back unchanged?"""
    assert redact(text) == text


def test_none_stays_none():
    """Does redact(None) answer None (nullable columns pass through)?"""
    assert redact(None) is None


def test_redact_data_walks_nested_structures():
    """Are secrets inside nested dicts and lists removed, other values kept?"""
    secret = "sk_" + "Q" * 30
    data = {"env": {"SAGAN_API_TOKEN": secret}, "args": ["--token", secret], "count": 3, "ok": True}
    cleaned = redact_data(data)
    assert secret not in repr(cleaned)
    assert cleaned["count"] == 3 and cleaned["ok"] is True
    assert cleaned["args"][0] == "--token"
