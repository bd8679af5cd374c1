"""What a stream gathered goes out as one delta a choice: text, logprobs and token ids
joined in order; other events, and deltas of another choice or kind, stay apart."""

from __future__ import annotations

from atom.text.gathering import joined_deltas
from atom.vocabulary.events import (
    ChoiceFinished,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    TokenText,
)


def text(idx: int, s: str, ids: tuple[int, ...] = ()) -> TextDelta:
    logprobs = tuple(TokenText(token=c, logprob=-1.0) for c in s) if ids else None
    return TextDelta(request_id="r", choice_idx=idx, text=s, logprobs=logprobs, token_ids=ids)


def test_consecutive_deltas_of_a_choice_join_and_the_rest_keeps_its_order() -> None:
    done = ChoiceFinished(
        request_id="r", choice_idx=0, finish_reason=FinishReason.STOP, num_tokens=3
    )
    events = [
        ReasoningDelta(request_id="r", choice_idx=0, text="th"),
        ReasoningDelta(request_id="r", choice_idx=0, text="ink"),
        text(0, "a", (1,)),
        text(0, "b", (2,)),
        text(1, "x", (9,)),
        text(0, "c", (3,)),
        done,
    ]
    got = joined_deltas(events)
    assert got == [
        ReasoningDelta(request_id="r", choice_idx=0, text="think"),
        text(0, "ab", (1, 2)),
        text(1, "x", (9,)),
        text(0, "c", (3,)),
        done,
    ]


def test_deltas_without_logprobs_stay_without() -> None:
    assert joined_deltas([text(0, "a"), text(0, "b")]) == [text(0, "ab")]
