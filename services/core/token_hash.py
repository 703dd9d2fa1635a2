"""How Sagan stores a bearer secret (API tokens, share links, pod progress tokens): only its hash.

The secrets are 256 bits of randomness, so a fast hash is enough (no KDF needed); a lookup is
one indexed equality on the hash.
"""
from __future__ import annotations

import hashlib


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
