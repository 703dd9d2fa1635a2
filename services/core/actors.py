"""Who is acting. Always built from the credential of a request or job, never from
a request body (SPEC §1: an agent's token cannot claim to be the owner)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    kind: str  # owner | member | agent | system | pod | token
    id: str | None = None
    label: str = ""

    @property
    def transition_role(self) -> str:
        """The role used by the transition table: API tokens act as agents (SPEC §2.3)."""
        return "agent" if self.kind == "token" else self.kind

    @classmethod
    def owner(cls, user) -> "Actor":
        return cls("owner", str(user.id), user.display_name or user.email)

    @classmethod
    def member(cls, user) -> "Actor":
        """An invited collaborator or mentor (SPEC §13), named as the owner sees them."""
        return cls("member", str(user.id), user.display_name or user.email)

    @classmethod
    def system(cls, label: str = "Sagan") -> "Actor":
        return cls("system", None, label)

    @classmethod
    def token(cls, token) -> "Actor":
        return cls("token", str(token.id), f"token {token.name}")

    @classmethod
    def owner_like(cls) -> "Actor":
        """The system carrying out an owner's earlier request (a cancel the loop completes)."""
        return cls("system", None, "owner request")


SYSTEM = Actor.system()
