"""The request's structured-output constraint as one llguidance grammar: `response_format`
(json_object, json_schema, structural_tag) or vLLM's `structured_outputs` (json, regex,
choice, grammar, json_object, structural_tag). An invalid schema, regex, grammar or tag
is a 400 naming the problem."""

from __future__ import annotations

import json

from atom.http.schemas import ResponseFormat, SamplingBody
from atom.text import constraints
from atom.vocabulary.errors import InvalidRequest


def constraint_of(body: SamplingBody) -> str | None:
    found: list[tuple[str, str]] = []
    rf = body.response_format
    try:
        if rf is not None and rf.type == "json_object":
            found.append(("response_format", constraints.json_object()))
        elif rf is not None and rf.type == "json_schema":
            if rf.json_schema is None or rf.json_schema.json_schema is None:
                raise InvalidRequest(
                    "response_format json_schema needs json_schema.schema", param="response_format"
                )
            found.append(("response_format", constraints.json_schema(rf.json_schema.json_schema)))
        elif rf is not None and rf.type == "structural_tag":
            found.append(("response_format", _structural_tag(rf)))
        if body.structured_outputs is not None:
            found.append(("structured_outputs", _structured(body)))
    except constraints.GrammarError as exc:
        param = "structured_outputs" if body.structured_outputs is not None else "response_format"
        raise InvalidRequest(str(exc), param=param) from None
    if len(found) > 1:
        raise InvalidRequest(
            "give one of response_format and structured_outputs", param="structured_outputs"
        )
    return found[0][1] if found else None


def _structured(body: SamplingBody) -> str:
    so = body.structured_outputs
    assert so is not None
    given = (so.json_spec, so.regex, so.choice, so.grammar, so.json_object, so.structural_tag)
    if sum(value is not None and value is not False for value in given) != 1:
        raise InvalidRequest(
            "structured_outputs takes exactly one of json, regex, choice, grammar, "
            "json_object, structural_tag",
            param="structured_outputs",
        )
    if so.structural_tag is not None:
        return _structural_tag(_tag_format(so.structural_tag))
    if so.json_spec is not None:
        return constraints.json_schema(so.json_spec)
    if so.regex is not None:
        return constraints.regex(so.regex)
    if so.choice is not None:
        return constraints.choice(so.choice)
    if so.grammar is not None:
        return constraints.grammar(so.grammar)
    return constraints.json_object()


def _tag_format(text: str) -> ResponseFormat:
    """vLLM's `structured_outputs.structural_tag`: the response format as JSON text."""
    try:
        return ResponseFormat.model_validate({"type": "structural_tag", **json.loads(text)})
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            f"structural_tag is not a structural tag's JSON: {str(exc).splitlines()[0]}",
            param="structured_outputs.structural_tag",
        ) from None


def _structural_tag(rf: ResponseFormat) -> str:
    unknown = next(iter(rf.model_extra or {}), None)  # such as xgrammar's newer `format`
    if unknown is not None:
        param = f"response_format.{unknown}"
        raise InvalidRequest(f"unsupported parameter: {param}", param=param)
    if not rf.structures or not rf.triggers:
        raise InvalidRequest(
            "a structural_tag response format needs structures and triggers",
            param="response_format",
        )
    structures = [(s.begin, s.json_schema, s.end) for s in rf.structures]
    return constraints.structural_tag(structures, rf.triggers)
