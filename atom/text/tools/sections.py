"""Formats with special-token sections: deepseek_v3 (fullwidth markers, fenced JSON),
kimi_k2 (`functions.NAME:IDX` ids) and qwen3_coder (XML-like parameters typed by the
tool's JSON schema)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from atom.text.scanning import held_back, json_value_end, skip_space
from atom.text.tools.base import PartialCall, Scan, beside_calls, scan_blocks, strict


@dataclass(frozen=True, slots=True)
class Section:
    """Content, `section` marker, then calls `call` NAME-PART `name_end` ARGS-JSON `call_end`."""

    section: str
    call: str
    name_end: str
    call_end: str
    name_of: Callable[[str], str]
    fence: str = ""  # skipped before the arguments (deepseek's ```json)

    def scan(self, text: str, *, is_final: bool) -> Scan:
        i = text.find(self.section)
        if i < 0:
            keep = 0 if is_final else held_back(text, [self.section])
            return Scan(content=beside_calls(text[: len(text) - keep], (), is_final=is_final))
        calls: list[PartialCall] = []
        pos = text.find(self.call, i)
        while pos >= 0:
            call, pos = self._call(text, pos + len(self.call), is_final=is_final)
            if call is None:
                break
            calls.append(call)
        if not calls and is_final:
            return Scan(content=text)
        content = beside_calls(text[:i], tuple(calls), is_final=is_final)
        return strict(Scan(content=content, calls=tuple(calls)), text, is_final=is_final)

    def _call(self, text: str, start: int, *, is_final: bool) -> tuple[PartialCall | None, int]:
        name_end = text.find(self.name_end, start)
        if name_end < 0:
            return None, -1
        value = skip_space(text, name_end + len(self.name_end))
        if self.fence and text.startswith(self.fence, value):
            value = skip_space(text, value + len(self.fence))
        elif self.fence and not is_final and self.fence.startswith(text[value:]):
            return PartialCall(name=self.name_of(text[start:name_end]), arguments=""), -1
        end = json_value_end(text, value)  # an end marker inside a JSON string is text
        close = text.find(self.call_end, end) if end is not None else -1
        limit = (
            close
            if close >= 0
            else len(text) - (0 if is_final else held_back(text, [self.call_end, "\n`"]))
        )
        args = text[value : end if end is not None else max(value, limit)]
        call = PartialCall(
            name=self.name_of(text[start:name_end]), arguments=args, is_complete=end is not None
        )
        return call, (text.find(self.call, close) if close >= 0 else -1)


def _deepseek_name(part: str) -> str:
    return part.split("<｜tool▁sep｜>", 1)[-1].strip()


def _kimi_name(part: str) -> str:
    name = part.strip().removeprefix("functions.")
    return name.rsplit(":", 1)[0] if ":" in name else name


def deepseek_v3() -> Section:
    return Section(
        section="<｜tool▁calls▁begin｜>",
        call="<｜tool▁call▁begin｜>",
        name_end="\n",
        call_end="<｜tool▁call▁end｜>",
        name_of=_deepseek_name,
        fence="```json",
    )


def kimi_k2() -> Section:
    return Section(
        section="<|tool_calls_section_begin|>",
        call="<|tool_call_begin|>",
        name_end="<|tool_call_argument_begin|>",
        call_end="<|tool_call_end|>",
        name_of=_kimi_name,
    )


_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Qwen3Coder:
    """`<tool_call><function=NAME><parameter=P>VALUE</parameter>…</function></tool_call>`.

    Arguments are built when `</function>` arrives (values converted by the tool's schema),
    so they stream as one fragment."""

    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name → parameters schema
    open: str = "<tool_call>"
    close: str = "</tool_call>"

    def scan(self, text: str, *, is_final: bool) -> Scan:
        return scan_blocks(
            text,
            open_marker=self.open,
            close_marker=self.close,
            is_final=is_final,
            read=lambda start, limit: self._call(text[start:limit]),
        )

    def _call(self, block: str) -> PartialCall | None:
        m = re.search(r"<function=([^>\n]+)>", block)
        if m is None:
            return None
        name = m.group(1).strip()
        end = block.find("</function>", m.end())
        if end < 0:
            return PartialCall(name=name, arguments="")
        schema = self.tools.get(name, {}).get("properties", {})
        args = {
            k.strip(): _typed(v, schema.get(k.strip(), {}))
            for k, v in _PARAM.findall(block[m.end() : end])
        }
        return PartialCall(
            name=name, arguments=json.dumps(args, ensure_ascii=False), is_complete=True
        )


def _typed(raw: str, schema: Mapping[str, Any]) -> Any:
    """A parameter's value by its schema's type — one type, a list of them
    (`["string", "null"]`) or `anyOf`/`oneOf` alternatives: `null` is None when null is
    allowed, a JSON value when the type is not a string, else the raw text (so is a
    number JSON cannot hold, such as 1e999)."""
    kinds = _types(schema)
    value = raw.strip()
    if value == "null" and "null" in kinds:
        return None
    if kinds & {"integer", "number", "boolean", "object", "array"}:
        try:
            loaded = json.loads(value.lower() if "boolean" in kinds else value, parse_float=_finite)
        except ValueError:
            return raw
        if not isinstance(loaded, str):
            return loaded
    return raw


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for alternative in [*schema.get("anyOf", ()), *schema.get("oneOf", ())]:
        if isinstance(alternative, Mapping):
            kinds |= _types(alternative)
    return kinds


def _finite(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"{literal} is not a finite number")
    return number
