"""pythonic / llama4_pythonic: the output is a Python list of calls, `[f(a=1), g(b="x")]`,
optionally inside `<|python_start|>…<|python_end|>`. Arguments are Python literals
(negative numbers included) converted to JSON when the list closes."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from atom.text.scanning import skip_space
from atom.text.tools.base import PartialCall, Scan

START, END = "<|python_start|>", "<|python_end|>"


@dataclass(frozen=True, slots=True)
class Pythonic:
    def scan(self, text: str, *, is_final: bool) -> Scan:
        i = skip_space(text, 0)
        if text.startswith(START, i):
            i = skip_space(text, i + len(START))
        elif not is_final and START.startswith(text[i:]) and text[i:]:
            return Scan(content="")
        if i >= len(text):
            return Scan(content=text if is_final else "")
        if text[i] != "[":
            return Scan(content=text)
        end = _list_end(text, i)
        if end is None:
            return Scan(content=text if is_final else "")
        calls = _calls(text[i:end])
        rest = text[end:].replace(END, "", 1).strip()
        if calls is None or rest:
            return Scan(content=text) if is_final or calls is None else Scan(content="")
        return Scan(content="", calls=calls)


def _list_end(text: str, start: int) -> int | None:
    depth, i, quote = 0, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


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
