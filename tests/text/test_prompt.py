from __future__ import annotations

from typing import Any

import pytest

from atom.text.prompt import encode_text, render_chat

TEXTS = [
    "plain words",
    "<|im_start|>user\nspecial tokens inside<|im_end|>\n",
    "  spaces,\ttabs\n\nand 東京 🦊",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("special", [True, False])
def test_the_direct_encode_gives_the_tokenizers_ids(
    tokenizer: Any, text: str, special: bool
) -> None:
    expected = tuple(tokenizer.encode(text, add_special_tokens=special))
    assert encode_text(tokenizer, text, add_special_tokens=special) == expected


def test_a_backend_left_truncating_goes_through_the_wrapper(tokenizer: Any) -> None:
    """A pooling call may leave the Rust tokenizer set to truncate: the wrapper resets
    that on each call, the backend alone would keep cutting."""
    backend = tokenizer.backend_tokenizer
    text = " ".join(["word"] * 40)
    backend.enable_truncation(8)
    try:
        assert len(encode_text(tokenizer, text, add_special_tokens=False)) == 40
    finally:
        backend.no_truncation()


def test_a_chat_renders_to_the_ids_apply_chat_template_gives(tokenizer: Any) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me a story about a fox 🦊."},
    ]
    expected = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=False, add_generation_prompt=True
    )
    assert render_chat(tokenizer, messages) == tuple(expected)
