"""The request's structured-output constraint as one llguidance grammar: `response_format`
(json_object, json_schema) or vLLM's `structured_outputs` (json, regex, choice, grammar,
json_object). An invalid schema, regex or grammar is a 400 naming the problem."""

from __future__ import annotations

from atom.http.schemas import SamplingBody
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
    given = (so.json_spec, so.regex, so.choice, so.grammar, so.json_object or None)
    if sum(value is not None for value in given) != 1:
        raise InvalidRequest(
            "structured_outputs takes exactly one of json, regex, choice, grammar, json_object",
            param="structured_outputs",
        )
    if so.json_spec is not None:
        return constraints.json_schema(so.json_spec)
    if so.regex is not None:
        return constraints.regex(so.regex)
    if so.choice is not None:
        return constraints.choice(so.choice)
    if so.grammar is not None:
        return constraints.grammar(so.grammar)
    return constraints.json_object()
