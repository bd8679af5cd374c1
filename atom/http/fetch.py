"""Planning off the event loop, with the web images it needs fetched in Trio.

Templates and tokenizers run in Trio's worker threads (`trio.to_thread`), which all
requests share. A web image is not fetched there: a slow image server would hold a
thread for as long as it drips bytes, and enough such requests would hold them all
(issue 46: enough of them kept plain chats waiting a minute). Instead the planning thread
stops at the first image it has not got (`media.FetchFirst`, before any rendering),
the request's own Trio task fetches every such image — one deadline for them all
(`--media-fetch-timeout`, connecting, waiting and reading included), at most
`MAX_FETCHES` at once across the server, cancellable as any Trio await — and plans
again with the bytes (`media.FETCHED`). Requests without web images plan once."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from types import MappingProxyType
from typing import TypeVar

import httpx
import trio
from trio.lowlevel import RunVar

from atom.http.media import FETCHED, FetchFirst, MediaPolicy, WebMedia
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.on_loop import ON_LOOP, OffLoop

T = TypeVar("T")
MAX_FETCHES = 16  # web image fetches in flight across the server
INLINE_PLAN_BYTES = 4096  # a request body this small plans on the event loop
_FETCHES: RunVar[trio.CapacityLimiter] = RunVar("atom_image_fetches")


async def plan_off_loop(
    settings: Settings, plan: Callable[..., T], *args: object, body_bytes: int | None = None
) -> T:
    """`plan(*args)` in a worker thread, the web images it asks for fetched first. A
    body of at most INLINE_PLAN_BYTES (`body_bytes`) plans on the event loop instead,
    sparing the thread's round trip (atom/vocabulary/on_loop.py: media and grammars
    send it to the thread all the same)."""
    fetched: dict[str, bytes] = {}
    on_loop = body_bytes is not None and body_bytes <= INLINE_PLAN_BYTES
    for _ in range(3):  # web media fetched, then off the loop, at most once each
        token, loop_token = FETCHED.set(MappingProxyType(dict(fetched))), ON_LOOP.set(on_loop)
        try:
            if on_loop:
                return plan(*args)
            return await trio.to_thread.run_sync(plan, *args)
        except FetchFirst as needed:
            fetched |= await fetch_media(needed.images, MediaPolicy.of(settings))
        except OffLoop:
            on_loop = False
        finally:
            FETCHED.reset(token)
            ON_LOOP.reset(loop_token)
    raise RuntimeError("planning asked again for images it was given")


async def fetch_media(images: tuple[WebMedia, ...], policy: MediaPolicy) -> dict[str, bytes]:
    """Each image's bytes, within one deadline for them all; InvalidRequest naming the
    image's field when one cannot be had."""
    fetched: dict[str, bytes] = {}
    current = images[0]
    with trio.move_on_after(policy.fetch_timeout_s) as deadline:
        client = httpx.AsyncClient(verify=_tls(), follow_redirects=False, timeout=None)
        async with client:
            for current in images:
                if current.url not in fetched:
                    async with _limiter():
                        fetched[current.url] = await _fetch(client, current, policy)
    if deadline.cancelled_caught:
        raise InvalidRequest(
            f"{current.param}: fetching the {current.kind} took more than "
            f"{policy.fetch_timeout_s:g} s (--media-fetch-timeout)",
            param=current.param,
        )
    return fetched


async def _fetch(client: httpx.AsyncClient, image: WebMedia, policy: MediaPolicy) -> bytes:
    param, chunks, size = image.param, list[bytes](), 0
    try:
        async with client.stream("GET", image.url) as response:
            if response.status_code != 200:
                raise InvalidRequest(
                    f"{param}: fetching the {image.kind} got HTTP {response.status_code}",
                    param=param,
                )
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > policy.max_bytes:
                    raise InvalidRequest(
                        f"{param}: the {image.kind} is over {policy.max_bytes} bytes", param=param
                    )
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise InvalidRequest(
            f"{param}: could not fetch the {image.kind}: {exc}", param=param
        ) from None
    return b"".join(chunks)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every fetch: making one reads the CA bundle (~0.1 s, on the
    event loop), as a new client would each time."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def _limiter() -> trio.CapacityLimiter:
    """The server's fetch slots: one limiter per Trio run, apart from the thread limiter."""
    try:
        return _FETCHES.get()
    except LookupError:
        _FETCHES.set(trio.CapacityLimiter(MAX_FETCHES))
        return _FETCHES.get()
