"""Small scanners shared by the tool-call and reasoning parsers: marker hold-back,
strings and balanced JSON (or Python) values read from text that may still be growing."""

from __future__ import annotations

from collections.abc import Iterable


def held_back(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some marker:
    text that must wait, because the next chunk may complete the marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def json_string_end(text: str, start: int) -> int | None:
    """Index after the string opening at `text[start]` (a quote; the same quote closes it,
    a backslash escapes), or None if unfinished."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == text[start]:
            return i + 1
        i += 1
    return None


def json_value_end(text: str, start: int) -> int | None:
    """Index after the JSON value starting at `start` (object, array, string or scalar),
    or None while it may still grow. Brackets inside strings are ignored."""
    if start >= len(text):
        return None
    if text[start] == '"':
        return json_string_end(text, start)
    if text[start] not in "{[":
        end = start
        while end < len(text) and text[end] not in ",}] \n\r\t;":
            end += 1
        return end if end < len(text) else None
    return bracket_end(text, start)


def bracket_end(
    text: str, start: int, *, quotes: str = '"', opening: str = "{[", closing: str = "}]"
) -> int | None:
    """Index after the bracketed value opening at `text[start]` (JSON's brackets and
    strings by default; Python's with `quotes="'\"", opening="([{", closing=")]}"`),
    brackets inside strings ignored; None while it may still grow."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch in quotes:
            string_end = json_string_end(text, i)
            if string_end is None:
                return None
            i = string_end
            continue
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i
