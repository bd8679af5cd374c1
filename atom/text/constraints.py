"""Structured-output constraints as llguidance grammars (plain strings, so they travel in
SamplingParams and the request log): JSON schema, any JSON object, regex, a choice of
strings, Lark/EBNF grammars, structural tags, and the shapes that enforce
`tool_choice`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import any_to_lark

from atom.vocabulary.on_loop import off_loop

LLM = llguidance.LLMatcher


class GrammarError(ValueError):
    """The schema, regex or grammar cannot be compiled; the message says why."""


def json_schema(schema: Mapping[str, Any] | str) -> str:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    try:
        return _checked(LLM.grammar_from_json_schema(text))
    except ValueError as exc:
        raise GrammarError(f"invalid JSON schema: {exc}") from None


def json_object() -> str:
    return json_schema({"type": "object"})


def regex(pattern: str) -> str:
    return _checked(LLM.grammar_from_regex(pattern))


def choice(options: Sequence[str]) -> str:
    if not options:
        raise GrammarError("choice needs at least one option")
    return _checked(LLM.grammar_from_lark("start: " + " | ".join(json.dumps(o) for o in options)))


def grammar(text: str) -> str:
    """A Lark grammar, or an EBNF/GBNF one (`root ::= …`), as vLLM's `grammar` takes."""
    try:
        source = any_to_lark(text)
    # llguidance's GBNF reader also raises a plain Exception ("No 'root' rule found").
    except Exception as exc:
        raise GrammarError(f"invalid grammar: {exc}") from None
    return _checked(LLM.grammar_from_lark(source))


def structural_tag(structures: Sequence[tuple[str, Any, str]], triggers: Sequence[str]) -> str:
    """Free text in which each trigger starts a structure: its `begin`, then arguments
    valid against its JSON schema, then its `end` ((begin, schema, end) each). A begin
    must start with one of the triggers. The text may hold any number of structures,
    or none."""
    if not structures or not triggers:
        raise GrammarError("a structural tag needs at least one structure and one trigger")
    tags = []
    for idx, (begin, schema, end) in enumerate(structures):
        trigger = next((t for t in triggers if t and begin.startswith(t)), None)
        if trigger is None:
            raise GrammarError(f"structures[{idx}].begin does not start with any trigger")
        tags.append(llguidance.StructTag(trigger=trigger, begin=begin, grammar=schema, end=end))
    try:
        return _checked(
            LLM.grammar_from_lark(llguidance.StructTag.to_grammar(tags, assume_special=False))
        )
    except ValueError as exc:
        raise GrammarError(f"invalid structural tag: {exc}") from None


def tool_arguments(parameters: Mapping[str, Any] | None) -> str:
    """A named tool_choice: the output is that function's arguments object."""
    return json_schema(strict_object(parameters))


def tool_call_list(tools: Sequence[Mapping[str, Any]], *, max_calls: int | None) -> str:
    """tool_choice "required": a JSON list of one or more `{"name", "parameters"}` calls."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["function"]["name"]},
                "parameters": strict_object(t["function"].get("parameters")),
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
    if max_calls is not None:
        schema["maxItems"] = max_calls
    return json_schema(schema)


def strict_object(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """The tool's parameters schema with `additionalProperties: false` where it is absent,
    or the model stuffs extra keys into the arguments."""
    schema = dict(parameters or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    schema.setdefault("additionalProperties", False)
    return schema


def _checked(grammar_text: str) -> str:
    off_loop()  # a grammar's check can take a while: not on the event loop
    error = LLM.validate_grammar(grammar_text)
    if error:
        raise GrammarError(error.strip().splitlines()[0] if error.strip() else error)
    return grammar_text
