"""Who may call the API and from which web pages: API keys and CORS.

Keys (`--api-key`, repeatable, `--api-key-file`, `ATOM_API_KEY`) are compared in
constant time with what the request sends as `Authorization: Bearer KEY` or
`x-api-key: KEY` (Anthropic's header). The key that matched is the request's `Tenant`
(atom/vocabulary/tenant.py): what it stores is its own, and only `--admin-api-key` sees every key's.
`/health`, the web page (`/` and its files under `/webui/`, not its feeds under
`/webui/api/`) and CORS preflights stay open; `/metrics` too unless `--protect-metrics`.
CORS follows vLLM's flags and defaults (every origin, method and header allowed; no
credentials).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from atom.http.asgi import ASGISend
from atom.vocabulary.config import Settings
from atom.vocabulary.tenant import EVERYONE, NOBODY, Tenant, fingerprint

Headers = list[tuple[bytes, bytes]]
TENANT_KEY = "atom.vocabulary.tenant"  # where AtomApp leaves the request's Tenant in the ASGI scope


def header(scope: MutableMapping[str, Any], name: bytes) -> bytes | None:
    """A request header's value (the first of that name), if sent."""
    return next((value for key, value in scope["headers"] if key.lower() == name), None)


class Access:
    def __init__(self, settings: Settings) -> None:
        keys = list(settings.api_key)
        if settings.api_key_file:
            lines = Path(settings.api_key_file).read_text().splitlines()
            keys += [line.strip() for line in lines if line.strip()]
        admin_keys = list(settings.admin_api_key)  # each one checked by Settings
        self._tenants = tuple(
            (key.encode(), Tenant(owner=fingerprint(key.encode()), sees_all=is_admin))
            for key, is_admin in [(k, False) for k in keys] + [(k, True) for k in admin_keys]
        )
        self._has_admin_keys = bool(admin_keys)
        self._enable_admin_routes = settings.enable_admin_routes
        self._protect_metrics = settings.protect_metrics
        self._origins = settings.allowed_origins
        self._methods = settings.allowed_methods
        self._headers = settings.allowed_headers
        self._credentials = settings.allow_credentials

    # --- API keys -------------------------------------------------------------------
    def tenant_of(self, scope: MutableMapping[str, Any]) -> Tenant | None:
        """Who makes the request: EVERYONE on a server without keys, the tenant of the key
        sent, NOBODY on an open route without one; None (a 401) otherwise."""
        if not self._tenants:
            return EVERYONE
        sent = _sent_key(scope)
        found = None
        for key, tenant in self._tenants:  # every key compared, so timing tells nothing
            if sent is not None and hmac.compare_digest(sent, key):
                found = tenant
        if found is not None:
            return found
        path = scope["path"]
        if path == "/health" or is_open_path(path) or is_preflight(scope):
            return NOBODY
        return NOBODY if path == "/metrics" and not self._protect_metrics else None

    def may_administer(self, tenant: Tenant) -> bool:
        """Admin routes: the admin key where one is set, else any key, and on a server
        without keys anyone only with `--enable-admin-routes`."""
        if not self._tenants:
            return self._enable_admin_routes
        return tenant.sees_all if self._has_admin_keys else tenant.owner is not None

    # --- CORS -----------------------------------------------------------------------
    def origin_allowed(self, origin: bytes) -> bool:
        return "*" in self._origins or origin.decode("latin-1") in self._origins

    def cors_headers(self, origin: bytes | None) -> Headers:
        """What every answer to a page on an allowed origin carries."""
        if origin is None or not self.origin_allowed(origin):
            return []
        if "*" in self._origins and not self._credentials:
            return [(b"access-control-allow-origin", b"*")]
        out = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
        if self._credentials:
            out.append((b"access-control-allow-credentials", b"true"))
        return out

    def preflight_headers(self, scope: MutableMapping[str, Any]) -> Headers | None:
        """The answer's own headers to a CORS preflight (`with_cors` adds the origin's),
        or None when its origin or method is refused."""
        origin = header(scope, b"origin")
        method = header(scope, b"access-control-request-method") or b""
        if origin is None or not self.origin_allowed(origin):
            return None
        if "*" not in self._methods and method.decode("latin-1") not in self._methods:
            return None
        asked = header(scope, b"access-control-request-headers") or b""
        allowed_headers = asked if "*" in self._headers else ", ".join(self._headers).encode()
        allowed_methods = method if "*" in self._methods else ", ".join(self._methods).encode()
        return [
            (b"access-control-allow-methods", allowed_methods),
            (b"access-control-allow-headers", allowed_headers),
            (b"access-control-max-age", b"600"),
        ]

    def with_cors(self, scope: MutableMapping[str, Any], send: ASGISend) -> ASGISend:
        """`send` that adds the CORS headers to the response's start, streams included."""
        extra = self.cors_headers(header(scope, b"origin"))
        if not extra:
            return send

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return sending


def tenant_in(scope: Mapping[str, Any]) -> Tenant:
    """The Tenant AtomApp admitted this request as (NOBODY if it did not)."""
    tenant = scope.get(TENANT_KEY)
    return tenant if isinstance(tenant, Tenant) else NOBODY


def is_open_path(path: str) -> bool:
    """The web page and its files: the page asks for the key, so it loads without one."""
    return path == "/" or (path.startswith("/webui/") and not path.startswith("/webui/api/"))


def is_preflight(scope: MutableMapping[str, Any]) -> bool:
    asked = header(scope, b"access-control-request-method")
    return scope["method"] == "OPTIONS" and asked is not None


def _sent_key(scope: MutableMapping[str, Any]) -> bytes | None:
    authorization = header(scope, b"authorization")
    if authorization is not None and authorization[:7].lower() == b"bearer ":
        return authorization[7:].strip()
    return header(scope, b"x-api-key")
