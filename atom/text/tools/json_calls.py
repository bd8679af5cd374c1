"""Formats whose calls are JSON objects `{"name": ..., "arguments": {...}}`: hermes/qwen
(`<tool_call>…</tool_call>`), granite (`<|tool_call|>[…]`), mistral (`[TOOL_CALLS] […]`
and `[TOOL_CALLS]name[ARGS]{…}`) and llama3_json (optional `<|python_tag|>` after content, calls
separated by `;`, `parameters` for arguments)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from atom.text.scanning import held_back, json_string_end, json_value_end, skip_space
from atom.text.tools.base import PartialCall, Scan, beside_calls, scan_blocks, strict

ARG_KEYS = ("arguments", "parameters")


def object_fields(text: str, start: int) -> tuple[dict[str, tuple[int, int | None]], int | None]:
    """Top-level fields of the JSON object at text[start] == '{': key → (value start, value
    end or None), and the object's end (None while unfinished or malformed)."""
    fields: dict[str, tuple[int, int | None]] = {}
    i = skip_space(text, start + 1)
    while i < len(text):
        if text[i] == "}":
            return fields, i + 1
        if text[i] == ",":
            i = skip_space(text, i + 1)
            continue
        key_end = json_string_end(text, i) if text[i] == '"' else None
        if key_end is None:
            return fields, None
        key = _string(text[i:key_end])
        if key is None:
            return fields, None  # an invalid escape: not a JSON object
        i = skip_space(text, key_end)
        if i >= len(text) or text[i] != ":":
            return fields, None
        i = skip_space(text, i + 1)
        value_end = json_value_end(text, i)
        fields[key] = (i, value_end)
        if value_end is None:
            return fields, None
        i = skip_space(text, value_end)
    return fields, None


def _string(literal: str) -> str | None:
    """A complete JSON string literal's value; None when it holds an invalid escape
    (`"\\q"`, `"\\u12"`), which the string scanner cannot tell from a valid one."""
    try:
        value = json.loads(literal)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def read_call(text: str, start: int, *, limit: int) -> tuple[PartialCall | None, int | None]:
    """The call object at `start`, read no further than `limit`: (call once its name is
    complete, else None; the object's end when it is complete)."""
    if start >= limit or text[start] != "{":
        return None, None
    fields, end = object_fields(text[:limit], start)
    name_span = fields.get("name")
    if name_span is None or name_span[1] is None or text[name_span[0]] != '"':
        return None, end
    name = _string(text[name_span[0] : name_span[1]])
    if name is None:
        return None, None  # an invalid escape in the name: no call, the text stays content
    arg_span = next((fields[k] for k in ARG_KEYS if k in fields), None)
    if arg_span is None:
        return PartialCall(
            name=name, arguments="{}" if end else "", is_complete=end is not None
        ), end
    arg_end = arg_span[1] if arg_span[1] is not None else limit
    return PartialCall(
        name=name, arguments=text[arg_span[0] : arg_end], is_complete=end is not None
    ), end


@dataclass(frozen=True, slots=True)
class Hermes:
    """`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, any number, text around them."""

    open: str = "<tool_call>"
    close: str = "</tool_call>"

    def scan(self, text: str, *, is_final: bool) -> Scan:
        def read(start: int, limit: int) -> PartialCall | None:
            return read_call(text, skip_space(text, start), limit=limit)[0]

        def body_end(start: int) -> int | None:
            """After the block's JSON object; a block that is no JSON ends at the marker."""
            i = skip_space(text, start)
            if i < len(text) and text[i] not in "{[":
                return start
            return json_value_end(text, i)

        return scan_blocks(
            text,
            open_marker=self.open,
            close_marker=self.close,
            is_final=is_final,
            read=read,
            body_end=body_end,
        )


def scan_call_list(
    text: str, start: int, *, is_final: bool, separator: str
) -> tuple[list[PartialCall], bool]:
    """Calls of a `[{…}, {…}]` list (separator ",") or of `{…}; {…}` (separator ";")
    starting at `start`; also whether everything from `start` parsed as calls."""
    calls: list[PartialCall] = []
    i = skip_space(text, start)
    is_list = separator == ","
    if is_list:
        if i >= len(text):
            return calls, True
        if text[i] != "[":
            return calls, False
        i = skip_space(text, i + 1)
    while i < len(text):
        call, end = read_call(text, i, limit=len(text))
        if call is None:
            return calls, end is None and not is_final and text[i] == "{"
        calls.append(call)
        if end is None:
            return calls, True
        i = skip_space(text, end)
        if i < len(text) and text[i] == separator:
            i = skip_space(text, i + 1)
        elif i < len(text) and is_list and text[i] == "]":
            return calls, skip_space(text, i + 1) == len(text)
    return calls, True


@dataclass(frozen=True, slots=True)
class Prefixed:
    """Content, then a marker and a JSON list of calls to the end (granite: the special
    token `<|tool_call|>`, or the text `<tool_call>` from 3.1 on; mistral v1-v3)."""

    markers: tuple[str, ...]

    def scan(self, text: str, *, is_final: bool) -> Scan:
        found = [(i, m) for m in self.markers if (i := text.find(m)) >= 0]
        if not found:
            keep = 0 if is_final else held_back(text, self.markers)
            return Scan(content=beside_calls(text[: len(text) - keep], (), is_final=is_final))
        i, marker = min(found)
        calls, ok = scan_call_list(text, i + len(marker), is_final=is_final, separator=",")
        if calls or (ok and not is_final):
            content = beside_calls(text[:i], tuple(calls), is_final=is_final)
            return strict(Scan(content=content, calls=tuple(calls)), text, is_final=is_final)
        return Scan(content=text)  # not a call list after all: keep everything as text


@dataclass(frozen=True, slots=True)
class Mistral:
    """`[TOOL_CALLS] [{…}]` (v1-v3 tokenizers) or `[TOOL_CALLS]name[ARGS]{…}` repeated (v7+;
    v11 may put `[CALL_ID]id` between the name and `[ARGS]`). A marker inside an
    argument string is text: the next call is looked for after the arguments end."""

    marker: str = "[TOOL_CALLS]"
    args_marker: str = "[ARGS]"
    id_marker: str = "[CALL_ID]"

    def scan(self, text: str, *, is_final: bool) -> Scan:
        i = text.find(self.marker)
        rest = skip_space(text, i + len(self.marker)) if i >= 0 else 0
        if i < 0 or rest >= len(text) or text[rest] == "[":
            return Prefixed((self.marker,)).scan(text, is_final=is_final)
        calls: list[PartialCall] = []
        start: int | None = i + len(self.marker)
        while start is not None:
            call, end = self._named_call(text, start, is_final=is_final)
            if call is None:
                break
            calls.append(call)
            nxt = text.find(self.marker, end) if end is not None else -1
            start = nxt + len(self.marker) if nxt >= 0 else None
        content = beside_calls(text[:i], tuple(calls), is_final=is_final)
        return strict(Scan(content=content, calls=tuple(calls)), text, is_final=is_final)

    def _named_call(
        self, text: str, start: int, *, is_final: bool
    ) -> tuple[PartialCall | None, int | None]:
        """The call whose name starts at `start`, and where its arguments end (None while
        they may grow)."""
        a = text.find(self.args_marker, start)
        nxt = text.find(self.marker, start)
        if a < 0 or (0 <= nxt < a):
            return None, None
        name = text[start:a].split(self.id_marker, 1)[0].strip()
        value = skip_space(text, a + len(self.args_marker))
        end = json_value_end(text, value)
        stop = (
            end
            if end is not None
            else len(text) - (0 if is_final else held_back(text, [self.marker]))
        )
        call = PartialCall(name=name, arguments=text[value:stop], is_complete=end is not None)
        return call, end


@dataclass(frozen=True, slots=True)
class Llama3Json:
    """Calls `{"name", "parameters"}` separated by `;`: the whole output, or after
    `<|python_tag|>` with content before it (models write some, whatever the template
    says; SGLang keeps it too)."""

    tag: str = "<|python_tag|>"

    def scan(self, text: str, *, is_final: bool) -> Scan:
        lead = text.find(self.tag)
        if lead < 0:
            start = skip_space(text, 0)
            if start < len(text) and text[start] == "{":
                return self._calls(text, "", start, is_final=is_final)
            keep = 0 if is_final else held_back(text, [self.tag])
            return Scan(content=beside_calls(text[: len(text) - keep], (), is_final=is_final))
        start = skip_space(text, lead + len(self.tag))
        if start >= len(text):
            return Scan(content=text if is_final else beside_calls(text[:lead], (), is_final=False))
        if text[start] != "{":
            return Scan(content=text)
        return self._calls(text, text[:lead], start, is_final=is_final)

    def _calls(self, text: str, before: str, start: int, *, is_final: bool) -> Scan:
        """The `;`-separated calls from `start`, `before` them the content; the whole
        text is content when they are no calls."""
        calls, ok = scan_call_list(text, start, is_final=is_final, separator=";")
        if calls or (ok and not is_final):
            content = beside_calls(before, tuple(calls), is_final=is_final)
            return strict(Scan(content=content, calls=tuple(calls)), text, is_final=is_final)
        return Scan(content=text)
