"""The owner's SSH public keys, registered on each RunPod account so its pods can be reached.

RunPod puts an account's registered keys into a pod only when the pod is created with
`startSsh` (Sagan always asks for it); with none registered the flag does nothing, and keys
registered later reach only pods created afterwards (`PUT /v2/account/ssh-keys`, API
reference v2, read 2026-12-02). So the owner adds keys per account in Settings, Sagan
registers them at once, every RunPod pod remembers how many keys the account held when it
was created (read from RunPod, so keys added in its console count), and its card shows the
exact ssh command — or says why there is none.

`PUT` replaces the account's whole set, so a save keeps the keys someone registered outside
Sagan (in RunPod's console): it reads the set, takes out the keys Sagan registered before,
and adds the owner's current ones. Only public keys are ever accepted, checked by their
OpenSSH wire format (type, base64 blob, size); a private key is refused without being kept
or shown again.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from models import Pod
from services.core import pod_accounts, settings
from services.core.clock import utcnow
from services.core.errors import ValidationError
from services.dispatch.backends import BackendError, backend_for

SETTING = "runpod_ssh_keys"   # {account: {"keys": [...], "registered_at": iso}}
MAX_KEYS = 10
MAX_LINE = 8192               # an RSA key of 16,384 bits is about 2,800 characters
MAX_COMMENT = 200
MIN_RSA_BITS, MAX_RSA_BITS = 2048, 16384
# OpenSSH public key types → what their blob holds after the type string.
KEY_TYPES = {
    "ssh-ed25519": "ed25519", "sk-ssh-ed25519@openssh.com": "sk-ed25519",
    "ecdsa-sha2-nistp256": "ecdsa", "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa",
    "sk-ecdsa-sha2-nistp256@openssh.com": "sk-ecdsa", "ssh-rsa": "rsa",
}
ECDSA_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}  # uncompressed: 0x04 ‖ x ‖ y
PRIVATE_MARKERS = ("PRIVATE KEY", "PuTTY-User-Key-File", "BEGIN OPENSSH", "BEGIN SSH2 ENCRYPTED")
PRIVATE_KEY_REFUSED = ("That is a private key. Paste the public key (the one line in the .pub file, "
                       "e.g. ~/.ssh/id_ed25519.pub) — a private key never leaves your machine. Nothing was saved.")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SSH_USER = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SSH_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class PublicKey:
    kind: str       # "ssh-ed25519", …
    blob: bytes
    comment: str

    @property
    def line(self) -> str:
        text = f"{self.kind} {base64.b64encode(self.blob).decode()}"
        return f"{text} {self.comment}" if self.comment else text

    @property
    def fingerprint(self) -> str:
        """As `ssh-keygen -l` prints it: SHA256 of the blob, base64 without padding."""
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")


def looks_private(text: str) -> bool:
    """The text holds a private key (OpenSSH, PEM, PuTTY), or part of one."""
    return any(marker in (text or "") for marker in PRIVATE_MARKERS)


def parse_keys(text: str) -> list[PublicKey]:
    """Public keys, one per line (blank lines ignored), or a ValidationError naming the line.
    A private key anywhere is refused with a sentence that does not repeat it."""
    text = text or ""
    if looks_private(text):
        raise ValidationError(PRIVATE_KEY_REFUSED, field="keys")
    keys: list[PublicKey] = []
    seen: dict[bytes, int] = {}
    numbered = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if len(numbered) > MAX_KEYS:
        raise ValidationError(f"At most {MAX_KEYS} keys per account; {len(numbered)} were given.", field="keys")
    for number, line in numbered:
        key = parse_key(line, number)
        if key.blob in seen:
            raise ValidationError(f"Line {number} repeats the key on line {seen[key.blob]}.", field="keys")
        seen[key.blob] = number
        keys.append(key)
    return keys


def parse_key(line: str, number: int = 1) -> PublicKey:
    """One OpenSSH public key line `<type> <base64> [comment]`, checked down to its blob."""
    where = f"Line {number}"
    if len(line) > MAX_LINE:
        raise ValidationError(f"{where} is {len(line):,} characters; a public key line is at most {MAX_LINE:,}.",
                              field="keys")
    if line.startswith("---- BEGIN SSH2 PUBLIC KEY"):
        raise ValidationError(f"{where} is an RFC 4716 (SSH2) public key: convert it to one OpenSSH line with "
                              "`ssh-keygen -i -f key.pub` and paste that.", field="keys")
    parts = line.split(None, 2)
    kind = parts[0]
    if kind not in KEY_TYPES:
        raise ValidationError(f"{where} starts with {kind[:40]!r}, not a public key type ({', '.join(KEY_TYPES)}); "
                              "authorized_keys options such as from=… are not accepted.", field="keys")
    if len(parts) < 2:
        raise ValidationError(f"{where} has the key type but no key after it.", field="keys")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{where}: the key after {kind} is not valid base64 (was it cut while copying?).",
                              field="keys") from None
    comment = parts[2].strip() if len(parts) > 2 else ""
    if len(comment) > MAX_COMMENT or _CONTROL.search(comment):
        raise ValidationError(f"{where}: the comment after the key must be one line of at most {MAX_COMMENT} "
                              "characters.", field="keys")
    problem = _blob_problem(kind, blob)
    if problem:
        raise ValidationError(f"{where}: {problem}", field="keys")
    return PublicKey(kind, blob, comment)


def _blob_problem(kind: str, blob: bytes) -> str | None:
    """What is wrong with a key's wire-format blob (RFC 4253 §6.6, RFC 5656, RFC 8709), or None."""
    try:
        fields = _ssh_strings(blob)
    except ValueError:
        return f"the {kind} key is cut short or malformed (was it cut while copying?)."
    if not fields:
        return f"the {kind} key is empty."
    if fields[0] != kind.encode():
        return f"the key inside is not an {kind} key (it says {fields[0][:40].decode('ascii', 'replace')!r})."
    shape = KEY_TYPES[kind]
    if shape == "ed25519":
        ok = len(fields) == 2 and len(fields[1]) == 32
    elif shape == "sk-ed25519":
        ok = len(fields) == 3 and len(fields[1]) == 32 and fields[2].startswith(b"ssh:")
    elif shape in ("ecdsa", "sk-ecdsa"):
        curve = kind.split("-")[-1].split("@")[0].encode()
        point = ECDSA_POINT_BYTES.get(curve.decode())
        ok = (len(fields) == (3 if shape == "ecdsa" else 4) and fields[1] == curve
              and len(fields[2]) == point and fields[2][:1] == b"\x04")
    else:  # rsa: e, n
        if len(fields) != 3:
            ok = False
        else:
            bits = int.from_bytes(fields[2], "big").bit_length()
            if not MIN_RSA_BITS <= bits <= MAX_RSA_BITS:
                return f"an RSA key of {bits} bits; use at least {MIN_RSA_BITS} (or an ed25519 key)."
            ok = int.from_bytes(fields[1], "big") >= 3
    return None if ok else f"the {kind} key has the wrong size or parts for its type."


def _ssh_strings(blob: bytes) -> list[bytes]:
    """The blob as its run of length-prefixed strings; ValueError when it does not split exactly."""
    fields, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob) or len(fields) >= 8:
            raise ValueError("cut short")
        (size,) = struct.unpack(">I", blob[at:at + 4])
        at += 4
        if at + size > len(blob):
            raise ValueError("cut short")
        fields.append(blob[at:at + size])
        at += size
    return fields


# --- stored and registered ------------------------------------------------------------------

def _stored() -> dict:
    value = settings.get(SETTING)
    return value if isinstance(value, dict) else {}


def registered(account: str) -> list[str]:
    """The key lines Sagan registered on this RunPod account (empty: none, or not RunPod)."""
    entry = _stored().get(account) or {}
    return list(entry.get("keys") or [])


def views() -> dict[str, list[PublicKey]]:
    """Each RunPod account's registered keys, parsed (for fingerprints on the Settings page); a
    stored line that no longer reads as a key (the row edited by hand) is left out, not a 500."""
    found: dict[str, list[PublicKey]] = {}
    for account in pod_accounts.with_ssh():
        found[account] = []
        for line in registered(account):
            try:
                found[account].append(parse_key(line))
            except ValidationError:
                continue
    return found


def update(account: str, text: str) -> list[PublicKey]:
    """Register the owner's keys for `account` at RunPod, keeping keys registered outside
    Sagan; store them once RunPod holds them. A bad key, or RunPod refusing, changes nothing."""
    if account not in pod_accounts.with_ssh():
        raise ValidationError(f"SSH keys are registered on an account whose pods have SSH "
                              f"({', '.join(pod_accounts.with_ssh())}), not {account[:20]!r}.",
                              field="account")
    keys = parse_keys(text)
    wanted = [key.line for key in keys]
    ours_before = {_blob_of(line) for line in registered(account)}
    try:
        backend = backend_for(account)
        others = [line for line in backend.ssh_keys()
                  if _blob_of(line) not in ours_before and _blob_of(line) not in {k.blob for k in keys}]
        backend.replace_ssh_keys(others + wanted)
    except BackendError as exc:
        raise ValidationError(f"RunPod did not take the keys ({exc.message}); nothing was saved.",
                              field="keys") from None
    store = dict(_stored())
    store[account] = {"keys": wanted, "registered_at": utcnow().isoformat()} if wanted else {"keys": []}
    settings.put(SETTING, store)
    return keys


def keys_on_account(backend) -> int | None:
    """How many SSH keys the account holds now, as RunPod says (what startSsh will hand a pod
    created next); None when it cannot be read — the create goes on regardless."""
    try:
        return len(backend.ssh_keys())
    except BackendError:
        return None


def _blob_of(line: str) -> bytes | None:
    """A key line's blob, to compare keys whatever their comments (None when unreadable)."""
    parts = str(line).split()
    try:
        return base64.b64decode(parts[1], validate=True) if len(parts) > 1 else None
    except (binascii.Error, ValueError):
        return None


# --- the pod card's line ---------------------------------------------------------------------

@dataclass(frozen=True)
class SshLine:
    command: str | None    # the exact ssh command, when the pod can be reached
    note: str              # what the owner should know (which way, or why there is no command)


def line_for(pod: Pod) -> SshLine | None:
    """What the pod card says about SSH; None for a pod that has no SSH (a local pod). A pod
    whose account held no key when it was created has no SSH access, whatever its address."""
    if pod.account not in pod_accounts.with_ssh():
        return None
    if (pod.metadata_ or {}).get("ssh_keys") == 0:
        if registered(pod.account):
            return SshLine(None, "no key registered when this pod was created — keys reach only pods created "
                                 "after they are registered")
        return SshLine(None, f"no key registered for the {pod.account} account — add your public key in "
                             "Settings → SSH keys")
    if not pod.ssh_host:
        return SshLine(None, "the address is not known yet (RunPod gives it once the pod has a machine)")
    command = ssh_command(pod.ssh_user, pod.ssh_host, pod.ssh_port)
    if command is None:
        return SshLine(None, "RunPod reported an address that is not a plain host and user; see its console")
    proxy = pod.ssh_host == "ssh.runpod.io"
    return SshLine(command, "through RunPod's SSH proxy: an interactive shell only (no scp or port forwarding)"
                   if proxy else "direct to the pod's public IP")


def ssh_command(user: str | None, host: str, port: int | None) -> str | None:
    """`ssh user@host -p port`, from parts checked to be plain names (they are shown to be pasted
    into a shell); None when a part is not."""
    user = user or "root"
    if not _SSH_USER.fullmatch(user) or not _SSH_HOST.fullmatch(host or "") or host.startswith("-"):
        return None
    if port is not None and not 0 < int(port) < 65536:
        return None
    return f"ssh {user}@{host}" + (f" -p {int(port)}" if port and int(port) != 22 else "")
