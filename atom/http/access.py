"""Who may call the API and from which web pages: API keys and CORS.

Keys (`--api-key`, repeatable, `--api-key-file`, `ATOM_API_KEY`) are compared in
constant time with what the request sends as `Authorization: Bearer KEY` or
`x-api-key: KEY` (Anthropic's header). `/health`, the web page (`/` and its files
under `/webui/`, not its feeds under `/webui/api/`) and CORS preflights stay open;
`/metrics` too unless `--protect-metrics`. CORS follows vLLM's flags and defaults
(every origin, method and header allowed; no credentials).
"""

from __future__ import annotations

import hmac
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from atom.config import Settings
from atom.http.asgi import ASGISend

Headers = list[tuple[bytes, bytes]]


def header(scope: MutableMapping[str, Any], name: bytes) -> bytes | None:
    """A request header's value (the first of that name), if sent."""
    return next((value for key, value in scope["headers"] if key.lower() == name), None)


class Access:
    def __init__(self, settings: Settings) -> None:
        keys = list(settings.api_key)
        if settings.api_key_file:
            lines = Path(settings.api_key_file).read_text().splitlines()
            keys += [line.strip() for line in lines if line.strip()]
        self._keys = tuple(key.encode() for key in keys)
        self._protect_metrics = settings.protect_metrics
        self._origins = settings.allowed_origins
        self._methods = settings.allowed_methods
        self._headers = settings.allowed_headers
        self._credentials = settings.allow_credentials
        # Admin routes are open to key holders, or to anyone only when asked for.
        self.has_admin = bool(self._keys) or settings.enable_admin_routes

    # --- API keys -------------------------------------------------------------------
    def is_allowed(self, scope: MutableMapping[str, Any]) -> bool:
        """Whether the request may proceed: no keys configured, an open route, or one
        of the keys sent."""
        path = scope["path"]
        if not self._keys or path == "/health" or is_open_path(path) or is_preflight(scope):
            return True
        if path == "/metrics" and not self._protect_metrics:
            return True
        sent = _sent_key(scope)
        matched = False
        for key in self._keys:  # every key compared, so timing tells nothing
            matched |= sent is not None and hmac.compare_digest(sent, key)
        return matched

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
