"""What a request takes between two sends, as one: the steps' tokens of each choice
through its pipeline in one feed, and the text deltas that come out joined. A request
that wakes after several steps (the Batcher ran ahead of it, or --stream-interval held
them) does the work of one, and `atom replay` rebuilds the same groups from the log
(atom/log/replay.py): the tokens logged for a request since its last output."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from atom.text.pipeline import ChoicePipeline
from atom.vocabulary.events import Event, ReasoningDelta, TextDelta, TokensSampled


def fed(
    choices: Sequence[ChoicePipeline],
    steps: list[TokensSampled],
    on_stop_string: Callable[[int], None] = lambda choice_idx: None,
) -> list[Event]:
    """The steps' tokens through their choices' pipelines, gathered a choice: the events
    to send, text deltas joined. A choice that finished drops what still arrives; one a
    stop string ended is passed to `on_stop_string` (its sequence can be freed now)."""
    events: list[Event] = []
    for sampled in gathered(steps):
        choice = choices[sampled.choice_idx]
        if choice.is_finished:
            continue
        events += choice.feed(sampled)
        if choice.is_finished and choice.is_stopped_by_string:
            on_stop_string(sampled.choice_idx)
    return joined_deltas(events)


def gathered(steps: list[TokensSampled]) -> list[TokensSampled]:
    """Each choice's tokens of several steps as one TokensSampled, in the order the
    choices first appear: its pipeline takes them as one step of several tokens (as it
    takes accepted drafts), a stop string still ending the choice at its token. Only
    for the pipeline: the log keeps each step's event."""
    by_choice: dict[int, TokensSampled] = {}
    for step in steps:
        last = by_choice.get(step.choice_idx)
        by_choice[step.choice_idx] = step if last is None else _then(last, step)
    return list(by_choice.values())


def _then(first: TokensSampled, then: TokensSampled) -> TokensSampled:
    logprobs = None
    if first.logprobs is not None or then.logprobs is not None:
        logprobs = (*(first.logprobs or ()), *(then.logprobs or ()))
    return replace(
        first,
        token_ids=first.token_ids + then.token_ids,
        finish_reason=then.finish_reason,
        logprobs=logprobs,
        drafts=None,
    )


def joined_deltas(events: list[Event]) -> list[Event]:
    """Consecutive text (or reasoning) deltas of one choice as one: what a stream
    gathered goes out as one chunk a choice, its logprobs and token ids with it."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if last is not None and _joinable(last, event):
            out[-1] = _join(last, event)
        else:
            out.append(event)
    return out


def _joinable(last: Event, event: Event) -> bool:
    if type(last) is not type(event) or not isinstance(event, TextDelta | ReasoningDelta):
        return False
    return getattr(last, "choice_idx", None) == event.choice_idx


def _join(last: Event, event: Event) -> Event:
    if isinstance(last, ReasoningDelta) and isinstance(event, ReasoningDelta):
        return replace(last, text=last.text + event.text)
    assert isinstance(last, TextDelta) and isinstance(event, TextDelta)
    logprobs = None
    if last.logprobs is not None or event.logprobs is not None:
        logprobs = (*(last.logprobs or ()), *(event.logprobs or ()))
    tokens = last.token_ids + event.token_ids
    return replace(last, text=last.text + event.text, logprobs=logprobs, token_ids=tokens)
