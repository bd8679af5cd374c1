"""Who a request belongs to: the fingerprint of the API key that made it (never the key
itself), and whether that key may see every key's stored responses and request views."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    """`owner` is what a request made by this key records (`RequestReceived.owner`);
    `sees_all` for the admin key, and for everyone on a server without keys."""

    owner: str | None = None
    sees_all: bool = True

    def may_see(self, owner: str | None) -> bool:
        """Whether state recorded under `owner` is this tenant's to read or change."""
        return self.sees_all or (self.owner is not None and owner == self.owner)


EVERYONE = Tenant()  # a server without API keys is one tenant
NOBODY = Tenant(sees_all=False)  # an open route reached without a key: sees nothing


def fingerprint(key: bytes) -> str:
    """A key's stable, non-secret name in the request log: 64 bits of its SHA-256."""
    return "key#" + hashlib.sha256(key).hexdigest()[:16]
