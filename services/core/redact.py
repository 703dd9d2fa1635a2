"""The one redactor: every text Sagan stores passes through here first (SPEC §5.4).

It removes the exact values of configured secrets and anything shaped like a
credential. Lesson from the old system: an agent printed the API token from `.env`
into a tool result and it was shown on the run page.

Two rules keep it from corrupting what it does not redact:

- a shell reference (`$NAME`, `${NAME}`) is never a secret: it names one that is filled
  in elsewhere (`-H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN"` in a plan);
- structured data is redacted value by value after parsing (`redact_data`,
  `redact_json_text`), never as raw JSON text, where a replacement could eat a quote or
  a backslash and break the document.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

REDACTED = "[REDACTED]"

# Environment variables whose values are secrets wherever they appear.
SECRET_ENV_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASS")
_SECRET_ENV_NAMES = {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"}
_MIN_SECRET_LEN = 8  # shorter values would redact ordinary words

# A name whose value is a secret: NAME_TOKEN, HF_KEY, apiKey, SecretAccessKey, password, db_passwd…
# The secret word must be a whole name segment: "monkey" or "hotkey" is not a key.
_SECRET_NAME = (r"(?:[A-Za-z0-9]+[_-])*"
                r"(?:[A-Z0-9]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)"
                r"|[A-Za-z][A-Za-z0-9]*(?:Token|Key|Secret|Password)"
                r"|(?i:token|key|secret|password|passwd|apikey|api_key|api-key))")
_SECRET_NAME_RE = re.compile(rf"{_SECRET_NAME}")
# As a JSON key, a bare "key" or "token" is usually a name, an id or a question's key
# ({"key": "base-model"}), not a credential: pairs need a more telling name.
_TOO_GENERIC_KEYS = frozenset({"key", "token"})
# A value that is a reference to a secret, not the secret: $NAME or ${NAME}.
_SHELL_REFERENCE = r"(?!\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(?![^\s'\"\\]))"
# A value runs to whitespace, a quote, or a backslash (an escaped quote inside JSON text).
_VALUE = r"[^\s'\"\\]+"

# Credentials recognisable by their own shape: a vendor prefix, then enough random
# characters that ordinary prose never matches. One alternation, so the text is scanned once
# for all of them (each separate pattern cost about 2 µs a call on a progress message).
_CREDENTIAL_SHAPES = (
    r"sk_[A-Za-z0-9_-]{8,}",                          # Sagan API tokens; Stripe sk_live_ / sk_test_
    r"spt_[A-Za-z0-9_-]{8,}",                         # Sagan pod tokens
    r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",  # OpenAI project, service-account, admin keys
    r"sk-[A-Za-z0-9]{48}\b",                          # OpenAI legacy user keys
    r"rpa_[A-Za-z0-9]{16,}",                          # RunPod
    r"hf_[A-Za-z0-9]{20,}",                           # Hugging Face
    r"gh[pousr]_[A-Za-z0-9]{30,}",                    # GitHub classic, OAuth, app tokens
    r"github_pat_[A-Za-z0-9_]{20,}",                  # GitHub fine-grained tokens
    r"gl(?:pat|dt|rt|ptt|cbt|imt|oas|soat)-[A-Za-z0-9_.-]{20,}",  # GitLab personal, deploy, runner… tokens
    r"(?:AKIA|ASIA)[0-9A-Z]{16}\b",                   # AWS access key ids
    r"AIza[0-9A-Za-z_-]{35}",                         # Google API keys
    r"ya29\.[0-9A-Za-z_-]{20,}",                      # Google OAuth access tokens
    r"GOCSPX-[A-Za-z0-9_-]{28}",                      # Google OAuth client secrets
    r"xox(?:[abeoprs]|e\.xox[bp])-[A-Za-z0-9-]{10,}",  # Slack bot, user, app, refresh, legacy tokens
    r"xapp-\d-[A-Za-z0-9-]{10,}",                     # Slack app-level tokens
    r"rk_(?:live|test)_[A-Za-z0-9]{20,}",             # Stripe restricted keys
    r"whsec_[A-Za-z0-9+/=]{20,}",                     # Stripe webhook signing secrets
    r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",       # SendGrid
    r"npm_[A-Za-z0-9]{36}",                           # npm
    r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",        # PyPI upload tokens (a macaroon for pypi.org)
    r"r8_[A-Za-z0-9]{37}",                            # Replicate
    r"gsk_[A-Za-z0-9]{52}",                           # Groq
    r"dckr_pat_[A-Za-z0-9_-]{20,}",                   # Docker Hub personal access tokens
    # JSON Web Tokens: base64url JSON header and payload, so both start with eyJ ('{"').
    r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
)
# Anthropic keys go wherever they start, even glued to a word ("KEYsk-ant-…"), as they always have.
_CREDENTIAL_SHAPE = re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}|\b(?:" + "|".join(_CREDENTIAL_SHAPES) + ")")

_PATTERNS = [
    # PEM private keys, whole block (RSA, EC, OPENSSH, ENCRYPTED…).
    (re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.S),
     REDACTED),
    # Authorization headers: keep the scheme so the text stays readable.
    (re.compile(rf"(?i)(authorization\s*[:=]\s*(?:bearer|basic|token)\s+){_SHELL_REFERENCE}{_VALUE}"),
     r"\1" + REDACTED),
    (re.compile(rf"(?i)\b(bearer\s+){_SHELL_REFERENCE}[A-Za-z0-9._~+/=-]{{12,}}"), r"\1" + REDACTED),
    # An AWS key pair printed side by side (a credentials CSV, `aws configure list`): the
    # 40-character secret has no prefix of its own, so it is only recognisable next to its id.
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}([\s,;:|\"'=]{1,8})[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
     REDACTED + r"\1" + REDACTED),
    (_CREDENTIAL_SHAPE, REDACTED),
    # Secrets that are part of a URL's path: incoming-webhook URLs post as whoever holds them.
    (re.compile(r"\b((?:hooks\.slack\.com/(?:services|workflows|triggers)|discord(?:app)?\.com/api/webhooks)/)"
                r"[A-Za-z0-9/_-]{20,}"), r"\1" + REDACTED),
    # JSON / YAML / Python-dict pairs: "WANDB_API_KEY": "value", 'password': 'value'.
    (re.compile(rf"(?<![A-Za-z0-9_])(['\"])(?!(?i:key|token)\1)({_SECRET_NAME})\1(\s*:\s*)(['\"]){_SHELL_REFERENCE}"
                rf"(?:\\.|(?!\4).)+\4"),
     r"\1\2\1\3\4" + REDACTED + r"\4"),
    # NAME_TOKEN=value, NAME_KEY: value, export NAME_SECRET="value", apiKey=value.
    (re.compile(rf"\b({_SECRET_NAME})(\s*[=:]\s*)(['\"]?){_SHELL_REFERENCE}{_VALUE}\3"),
     r"\1\2\3" + REDACTED + r"\3"),
    # credentials inside URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1" + REDACTED + "@"),
]


# The secret values found in the environment, and the environment they were found in.
# Scanning os.environ (decoding every name and value) cost ~90 µs, and every redact() call
# did it — four times per progress post. Comparing the raw environment with the copy kept
# here is a C-level dict comparison (under a microsecond), so a variable set, changed or
# removed since (a test's monkeypatch, a reloaded setting) is still seen on the next call.
_secrets_cache: tuple[dict, tuple[str, ...]] | None = None


def _raw_environment() -> dict:
    """os.environ's underlying mapping (encoded names and values), else a decoded copy."""
    raw = getattr(os.environ, "_data", None)
    return raw if isinstance(raw, dict) else dict(os.environ)


def configured_secret_values() -> list[str]:
    """Exact values of secrets in the environment, longest first."""
    global _secrets_cache
    raw = _raw_environment()
    cached = _secrets_cache
    if cached is not None and cached[0] == raw:
        return list(cached[1])
    values = set()
    for name, value in os.environ.items():
        if not value or len(value) < _MIN_SECRET_LEN:
            continue
        if name in _SECRET_ENV_NAMES or name.endswith(SECRET_ENV_SUFFIXES):
            values.add(value)
    found = tuple(sorted(values, key=len, reverse=True))
    _secrets_cache = (dict(raw), found)
    return list(found)


def redact(text: str | None, extra_secrets: list[str] | None = None) -> str | None:
    """Return `text` with every known secret value and credential pattern removed."""
    if not text:
        return text
    for value in (*configured_secret_values(), *(extra_secrets or ())):
        if value and value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def is_secret_name(name: str) -> bool:
    """Does a key such as `WANDB_API_KEY`, `password` or `apiKey` name a secret?"""
    return bool(_SECRET_NAME_RE.fullmatch(name or "")) and name.lower() not in _TOO_GENERIC_KEYS


def redact_data(value: Any) -> Any:
    """Redact every string inside a JSON-like structure, value by value.

    A string value under a secret-named key (`"password": "…"`) goes whole, unless it is
    a `$NAME` reference; keys and other strings pass through `redact`.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        cleaned = {}
        for key, item in value.items():
            key = redact(str(key))
            if isinstance(item, str) and item and is_secret_name(key) \
                    and not re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", item):
                cleaned[key] = REDACTED
            else:
                cleaned[key] = redact_data(item)
        return cleaned
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


def redact_json_text(text: str) -> str:
    """A JSON document's text with its values redacted after parsing.

    Unchanged data keeps the original text (its formatting); redacted data is written back
    as indented JSON. Text that is not JSON is redacted as text.
    """
    try:
        data = json.loads(text)
    except ValueError:
        return redact(text)
    cleaned = redact_data(data)
    if cleaned == data:
        return text
    return json.dumps(cleaned, indent=2, ensure_ascii=False)
