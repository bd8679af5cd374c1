"""Requests written byte for byte on a plain socket, for what HTTP clients would tidy up
(HTTP/1.0, `//paths`, `/./paths`, `%2F`)."""

from __future__ import annotations

import re

import trio


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def raw_exchange(
    url: str, request: bytes, *, until_closed: bool = True, timeout_s: float = 30
) -> bytes:
    """Send `request` bytes on a fresh connection; what the server sends until it closes
    the connection, or (`until_closed=False`) until a response with a Content-Length is
    whole. Fails the test if that takes longer than `timeout_s`."""
    stream = await trio.open_tcp_stream(*host_port(url))
    received = bytearray()
    async with stream:
        await stream.send_all(request)
        with trio.fail_after(timeout_s):
            while chunk := await stream.receive_some():
                received += chunk
                if not until_closed and is_whole(bytes(received)):
                    break
    return bytes(received)


def is_whole(response: bytes) -> bool:
    head, sep, body = response.partition(b"\r\n\r\n")
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    return bool(sep) and length is not None and len(body) >= int(length.group(1))


def http11_request(method: str, target: str, body: bytes = b"", headers: str = "") -> bytes:
    """One HTTP/1.1 request for `target` exactly as given, closing the connection after."""
    head = f"{method} {target} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n{headers}"
    length = f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + length.encode() + body


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])
