"""Grammars that cannot compile are a GrammarError (a 400 naming the field), whatever the
reader raised: llguidance's GBNF reader raises a plain Exception for a missing root rule
(found by the OpenAPI fuzz test, it was a 500)."""

from __future__ import annotations

import pytest

from atom.text import constraints


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('a ::= "x"', "No 'root' rule found"),
        ("", "No 'root' rule found"),
        ("::=", "Expected name"),
        ("start: (", "Expected token ')'"),
        ("root ::= [z-a]", "invalid regex"),
    ],
)
def test_a_grammar_that_does_not_compile_is_a_grammar_error(text: str, says: str) -> None:
    with pytest.raises(constraints.GrammarError) as raised:
        constraints.grammar(text)
    assert says in str(raised.value)


@pytest.mark.parametrize("text", ['start: "x" | "y"', 'root ::= "x" | "y"'])
def test_lark_and_gbnf_grammars_compile(text: str) -> None:
    assert constraints.grammar(text)
