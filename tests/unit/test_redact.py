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


def test_the_secret_values_follow_every_change_to_the_environment(monkeypatch):
    """The values are kept between calls (a hot path): is a secret set, changed or removed
    after a first redact() still seen by the next call?"""
    text = "first=alpha-river-00042 second=omega-delta-00043"
    assert redact(text) == text  # no such secrets yet (and the values are now kept)
    monkeypatch.setenv("SAGAN_TEST_ROTATING_SECRET", "alpha-river-00042")
    assert redact(text) == f"first={REDACTED} second=omega-delta-00043"
    monkeypatch.setenv("SAGAN_TEST_ROTATING_SECRET", "omega-delta-00043")
    assert redact(text) == f"first=alpha-river-00042 second={REDACTED}"
    monkeypatch.delenv("SAGAN_TEST_ROTATING_SECRET")
    assert redact(text) == text


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


# --- issue 17 item 9: the gaps, and never corrupting what is not a secret -----------------

@pytest.mark.parametrize("secret", [
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ",      # GitHub classic token (36 after ghp_)
    "gho_" + "Z9y8X7w6V5u4T3s2R1q0PoNmLkJiHgFeDcBa",      # GitHub OAuth token
    "github_pat_" + "11ABCDEFG0abcdefghijkl_" + "m" * 59,  # GitHub fine-grained token
    "AKIA" + "IOSFODNN7EXAMPLE",                         # AWS access key id
])
def test_more_token_shapes_are_removed(secret):
    """Are GitHub and AWS key shapes removed from text, the words around them kept?"""
    cleaned = redact(f"export said {secret} in the log")
    assert secret not in cleaned
    assert cleaned == f"export said {REDACTED} in the log"


def test_pem_private_key_block_is_removed():
    """Is a whole PEM private key (any kind) removed, with the text around it kept?"""
    pem = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
           "AAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----")
    cleaned = redact(f"the key is\n{pem}\nthat is all")
    assert "b3BlbnNzaC1rZXkt" not in cleaned
    assert cleaned == f"the key is\n{REDACTED}\nthat is all"
    rsa = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    assert redact(rsa) == REDACTED


@pytest.mark.parametrize("text, secret", [
    ('{"WANDB_API_KEY": "wandb-0123456789abcdef"}', "wandb-0123456789abcdef"),
    ('{"password": "correct horse battery"}', "correct horse battery"),
    ("{'db_password': 'hunter2hunter2'}", "hunter2hunter2"),
    ('"apiKey" : "camel-secret-value-1"', "camel-secret-value-1"),
])
def test_json_style_pairs_are_removed(text, secret):
    """Is the value of a quoted "SECRET_NAME": "value" pair removed, the key and quotes kept?"""
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned
    assert cleaned.count('"') == text.count('"') and cleaned.count("'") == text.count("'")


@pytest.mark.parametrize("text", [
    'curl -H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN" "$SAGAN_PROGRESS_URL"',
    "curl -H 'Authorization: Bearer ${SAGAN_POD_PROGRESS_TOKEN}' https://x",
    "HF_TOKEN=$HF_TOKEN python train.py",
    'export WANDB_API_KEY="${WANDB_API_KEY}"',
    '{"password": "$DB_PASSWORD"}',
])
def test_shell_references_are_never_redacted(text):
    """Is a `$NAME` / `${NAME}` reference (not a secret, a name of one) left exactly as written?"""
    assert redact(text) == text


def test_a_plan_command_in_json_survives_redaction():
    """Does JSON text with an escaped bearer-header command stay valid JSON, unchanged?

    The old system's plans carry this exact command; the redactor used to eat the
    backslash before the closing quote and the plan's spec no longer parsed.
    """
    import json
    spec = {"dockerArgs": 'curl -H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN" -d @p.json $URL'}
    text = json.dumps(spec)
    assert redact(text) == text
    assert json.loads(redact(text)) == spec


def test_redact_data_redacts_values_under_secret_names():
    """Is a value under a secret-named key removed whole (even a short or spaced one), and a
    `$NAME` value under such a key kept?"""
    data = {"env": {"WANDB_API_KEY": "short", "password": "two words", "HF_TOKEN": "$HF_TOKEN",
                    "EPOCHS": "3", "monkey": "banana"}}
    cleaned = redact_data(data)["env"]
    assert cleaned["WANDB_API_KEY"] == REDACTED and cleaned["password"] == REDACTED
    assert cleaned["HF_TOKEN"] == "$HF_TOKEN"
    assert cleaned["EPOCHS"] == "3" and cleaned["monkey"] == "banana"


def test_redact_json_text_parses_first_and_keeps_unchanged_text():
    """Is JSON text redacted per value (still valid JSON), and returned byte-identical when
    nothing in it is secret?"""
    import json

    from services.redact import redact_json_text
    clean = '{"a":  1, "cmd": "echo \\"$X\\""}'
    assert redact_json_text(clean) == clean
    dirty = '{"env": {"GITHUB_TOKEN": "ghp_' + "x" * 36 + '"}, "n": 2}'
    out = json.loads(redact_json_text(dirty))
    assert out == {"env": {"GITHUB_TOKEN": REDACTED}, "n": 2}
    assert redact_json_text("not json sk_" + "q" * 20) == "not json " + REDACTED


def test_redact_plan_keeps_the_spec_parseable():
    """Does a plan whose spec carries a secret in env come out with the secret gone and the
    spec still valid JSON, and a plan without secrets come out unchanged?"""
    import json

    from services.plans import _split_spec, redact_plan
    plan = ("# Goal\nTrain it.\n\n```runpod-spec\n"
            '{"gpuType": "H100", "env": {"WANDB_API_KEY": "wandb-abcdef0123456789"},'
            ' "dockerArgs": "curl -H \\"authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN\\" $U"}\n'
            "```\nafter the spec\n")
    cleaned = redact_plan(plan)
    assert "wandb-abcdef0123456789" not in cleaned
    _, spec_text, trailer, error = _split_spec(cleaned.split("\n"))
    spec = json.loads(spec_text)
    assert error is None and spec["env"]["WANDB_API_KEY"] == REDACTED
    assert "$SAGAN_POD_PROGRESS_TOKEN" in spec["dockerArgs"]
    assert trailer == ["after the spec", ""]
    untouched = plan.replace("wandb-abcdef0123456789", "$WANDB_API_KEY")
    assert redact_plan(untouched) == untouched


@pytest.mark.parametrize("text", ['{"key": "base-model", "text": "Which base model?"}',
                                  '{"token": "sentencepiece", "keyboard": "qwerty"}'])
def test_generic_key_names_in_json_are_not_secrets(text):
    """Are `"key": …` / `"token": …` pairs (a question's key, a tokenizer) left alone, in text and data?"""
    import json
    assert redact(text) == text
    assert redact_data(json.loads(text)) == json.loads(text)
