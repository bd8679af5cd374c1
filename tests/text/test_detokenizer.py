from __future__ import annotations

from typing import Any

import pytest

from atom.text.choice_text import ChoiceText
from atom.text.detokenizer import IncrementalDetokenizer, direct_decode
from atom.vocabulary.events import FinishReason, SamplingParams, TokenLogprobs

TEXTS = [
    "The capital of France is Paris.",
    "Ça marche: 東京は日本の首都です 🙂🚀 done",
    "  leading spaces and\nnew lines\n\n  indented",
    "emoji family 👨‍👩‍👧 and accents éèà",
]


@pytest.mark.parametrize("text", TEXTS)
def test_token_by_token_equals_whole_decode(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.push([i]) for i in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == tokenizer.decode(ids)
    assert all("\ufffd" not in piece for piece in pieces)


@pytest.mark.parametrize("skip", [True, False])
def test_the_direct_decode_gives_the_tokenizers_text(tokenizer: Any, skip: bool) -> None:
    ids = [tokenizer.eos_token_id, *tokenizer.encode(" ".join(TEXTS), add_special_tokens=False)]
    ids += [tokenizer.bos_token_id or 0, 13, tokenizer.eos_token_id]
    decode = direct_decode(tokenizer)
    for start in range(0, len(ids), 7):
        window = ids[start : start + 9]
        assert decode(window, skip) == tokenizer.decode(window, skip_special_tokens=skip)


def test_a_tokenizer_that_cleans_up_spaces_keeps_its_own_decode() -> None:
    class Backend:
        def decode(self, token_ids: Any, skip_special_tokens: bool = True) -> str:
            raise AssertionError("the backend skips the wrapper's clean-up")

    class CleaningUp:
        clean_up_tokenization_spaces = True
        backend_tokenizer = Backend()

        def decode(self, token_ids: Any, skip_special_tokens: bool = True) -> str:
            return f"{list(token_ids)} {skip_special_tokens}"

    assert direct_decode(CleaningUp())([1, 2], False) == "[1, 2] False"


def test_multibyte_character_is_never_split(tokenizer: Any) -> None:
    ids = tokenizer.encode("🙂", add_special_tokens=False)
    assert len(ids) > 1  # byte-level BPE spreads the emoji over several tokens
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.push([i]) for i in ids][:-1] == [""] * (len(ids) - 1)


def test_choice_text_stops_on_string_and_counts_tokens(tokenizer: Any) -> None:
    ids = tokenizer.encode("one two three four", add_special_tokens=False)
    choice = ChoiceText(tokenizer, SamplingParams(stop=(" three",)))
    texts = []
    for i in ids:
        update = choice.feed([i], None)
        texts.append(update.text)
        if update.finish_reason is not None:
            break
    assert "".join(texts) == "one two"
    assert choice.finish_reason is FinishReason.STOP
    assert update.stop_string == " three"
    assert choice.num_tokens == 3


def test_a_stop_string_inside_a_steps_tokens_ends_the_choice_at_its_token(
    tokenizer: Any,
) -> None:
    """A step that accepted drafts brings several tokens: the ones after the stop
    string's token give no text, no logprobs entry and no count, as if fed one a step."""
    ids = tokenizer.encode("one two three four five", add_special_tokens=False)
    entries = [TokenLogprobs(logprob=-float(i)) for i in range(len(ids))]
    choice = ChoiceText(tokenizer, SamplingParams(stop=(" three",), logprobs=0))
    update = choice.feed(ids, None, entries)
    assert update.text == "one two" and update.stop_string == " three"
    assert update.num_tokens == choice.num_tokens == 3
    assert update.logprobs is not None and [e.logprob for e in update.logprobs] == [0, -1, -2]


def test_choice_text_flushes_held_text_on_length(tokenizer: Any) -> None:
    ids = tokenizer.encode("abc TH", add_special_tokens=False)
    choice = ChoiceText(tokenizer, SamplingParams(stop=("THE END",)))
    out = [choice.feed([i], None).text for i in ids[:-1]]
    last = choice.feed([ids[-1]], FinishReason.LENGTH)
    assert "".join(out) + last.text == "abc TH"
    assert last.finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("feed", [2, 3, 5])
def test_feeds_of_several_tokens_give_the_text_token_by_token_gives(
    tokenizer: Any, text: str, feed: int
) -> None:
    """A request that wakes after several steps decodes their tokens at once (no stop
    strings, logprobs or reasoning parser): the same text, held back at a split character
    the same way."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    whole = ChoiceText(tokenizer, SamplingParams())
    single = ChoiceText(tokenizer, SamplingParams())
    for start in range(0, len(ids), feed):
        group = ids[start : start + feed]
        reason = FinishReason.LENGTH if start + feed >= len(ids) else None
        got = whole.feed(group, reason)
        one_by_one = "".join(
            single.feed([t], reason if i == len(group) - 1 else None).text
            for i, t in enumerate(group)
        )
        assert got.text == one_by_one
        assert got.num_tokens == len(group)
    assert whole.num_tokens == single.num_tokens == len(ids)


def test_a_feed_ending_in_a_split_character_goes_token_by_token(tokenizer: Any) -> None:
    """The emoji's bytes span tokens: a feed ending inside it still gives the text of the
    tokens before it at once, as token-by-token feeding does."""
    head = tokenizer.encode("fox ", add_special_tokens=False)
    emoji = tokenizer.encode("🙂", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer)
    assert detok.push_whole([*head, emoji[0]]) is None  # unchanged: nothing taken
    choice = ChoiceText(tokenizer, SamplingParams())
    update = choice.feed([*head, emoji[0]], None)
    assert update.text == "fox " and update.pieces[-1] == ""  # the split one, held back
    assert choice.feed(emoji[1:], None).text == "🙂"


def test_a_reasoning_parser_gets_each_tokens_piece(tokenizer: Any) -> None:
    ids = tokenizer.encode(" one two three", add_special_tokens=False)
    pieces = ChoiceText(tokenizer, SamplingParams(), wants_pieces=True).feed(ids, None).pieces
    assert len(pieces) == len(ids) and "".join(pieces) == " one two three"
