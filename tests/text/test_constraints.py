"""Grammars that cannot compile are a GrammarError (a 400 naming the field), whatever the
reader raised: llguidance's GBNF reader raises a plain Exception for a missing root rule
(found by the OpenAPI fuzz test, it was a 500)."""

from __future__ import annotations

from typing import Any

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


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TAG = [("<function=get_weather>", WEATHER, "</function>")]


def accepts(grammar: str, text: str, tokenizer: Any) -> bool:
    """Whether `text` (as the tokenizer encodes it) is a complete output of `grammar`."""
    import llguidance.hf

    matcher = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tokenizer), grammar)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


def test_a_structural_tag_constrains_what_follows_its_trigger_only(tokenizer: Any) -> None:
    grammar = constraints.structural_tag(TAG, ["<function="])
    call = '<function=get_weather>{"city": "Paris"}</function>'
    assert accepts(grammar, "Plain text with no call at all.", tokenizer)
    assert accepts(grammar, f"Let me look. {call} Done.", tokenizer)
    assert not accepts(grammar, '<function=get_weather>{"town": "Paris"}</function>', tokenizer)
    assert not accepts(grammar, "<function=other>{}</function>", tokenizer)


@pytest.mark.parametrize(
    ("structures", "triggers", "says"),
    [
        (TAG, ["<tool>"], "structures[0].begin does not start with any trigger"),
        ([], ["<function="], "at least one structure and one trigger"),
        ([("<f=a>", {"type": "nope"}, "</f>")], ["<f="], "invalid"),
    ],
)
def test_a_structural_tag_that_cannot_compile_is_a_grammar_error(
    structures: list[tuple[str, Any, str]], triggers: list[str], says: str
) -> None:
    with pytest.raises(constraints.GrammarError) as raised:
        constraints.structural_tag(structures, triggers)
    assert says in str(raised.value)
