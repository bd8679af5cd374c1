"""pythonic / llama4_pythonic: the output ends in a Python list of calls, `[f(a=1),
g(b="x")]`, optionally inside `<|python_start|>…<|python_end|>`, after any content. Arguments are
Python literals (negative numbers included) converted to JSON when the list closes."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from atom.text.scanning import bracket_end, held_back, skip_space
from atom.text.tools.base import PartialCall, Scan, beside_calls

START, END = "<|python_start|>", "<|python_end|>"
PYTHON = {"quotes": "'\"", "opening": "([{", "closing": ")]}"}  # Python's strings, brackets


@dataclass(frozen=True, slots=True)
class Pythonic:
    """The call list ends the output; text before it is content (SGLang keeps it, and
    models write it). A `[` that opens no call list, or one that more text follows,
    is content too."""

    def scan(self, text: str, *, is_final: bool) -> Scan:
        pos = 0
        while True:
            lead, start = _next_list(text, pos)
            if lead < 0:
                keep = 0 if is_final else held_back(text, [START])
                return Scan(content=beside_calls(text[: len(text) - keep], (), is_final=is_final))
            end = bracket_end(text, start, **PYTHON) if start < len(text) else None
            if end is None:  # the list (or the text after the start marker) is unfinished
                return Scan(
                    content=text if is_final else beside_calls(text[:lead], (), is_final=False)
                )
            calls = _calls(text[start:end])
            if calls is not None and _ends_output(text[end:], is_final=is_final):
                if not is_final:  # text may still follow: the calls wait (scans stay monotone)
                    return Scan(content=beside_calls(text[:lead], (), is_final=False))
                return Scan(content=beside_calls(text[:lead], calls, is_final=True), calls=calls)
            pos = end


def _ends_output(rest: str, *, is_final: bool) -> bool:
    """Whether a call list followed by `rest` ends the output: only whitespace and an
    end marker (or, while more may come, the start of one) follow it."""
    rest = rest.replace(END, "", 1)
    return not rest[: len(rest) - (0 if is_final else held_back(rest, [END]))].strip()


def _next_list(text: str, pos: int) -> tuple[int, int]:
    """Where the next possible call list at or after `pos` begins (its `<|python_start|>`
    or its `[`; -1 when there is none) and where its `[` is (len(text) while unknown)."""
    while True:
        bracket, marker = text.find("[", pos), text.find(START, pos)
        if marker < 0 or 0 <= bracket < marker:
            return bracket, bracket
        start = skip_space(text, marker + len(START))
        if start == len(text) or text[start] == "[":
            return marker, start
        pos = start  # a start marker before no list is text


def _calls(source: str) -> tuple[PartialCall, ...] | None:
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.List) or not all(isinstance(c, ast.Call) for c in tree.elts):
        return None
    calls = []
    for node in tree.elts:
        assert isinstance(node, ast.Call)
        name = ast.unparse(node.func)
        if node.args:
            return None
        arguments = _json_arguments(node)
        if arguments is None:
            return None
        calls.append(PartialCall(name=name, arguments=arguments, is_complete=True))
    return tuple(calls)


def _json_arguments(call: ast.Call) -> str | None:
    """The keyword arguments as a JSON object; None for values that are no JSON (sets,
    bytes, complex numbers, non-string keys) or no literals: the text stays content."""
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        return json.dumps(args, ensure_ascii=False)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
