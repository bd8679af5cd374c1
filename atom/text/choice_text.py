"""ChoiceText: one choice's text state — token ids in, output text and finish reason out.

Pure and synchronous, so the actor pipeline and projection replay run the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from atom.text.detokenizer import Decoder, IncrementalDetokenizer
from atom.text.stop import StopMatcher
from atom.vocabulary.events import (
    FinishReason,
    PromptToken,
    SamplingParams,
    TokenLogprobs,
    TokenText,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceUpdate:
    text: str
    finish_reason: FinishReason | None
    stop_string: str | None = None  # the stop string that ended the choice
    logprobs: tuple[TokenText, ...] | None = None
    num_tokens: int = 0  # of the tokens fed, how many the choice took (a stop string's
    # token ends it: the ones after it in the same step are dropped)
    # the text each taken token gave, in order (`text` joined); empty when the tokens
    # were decoded at once (the ChoiceText was built without `wants_pieces`)
    pieces: tuple[str, ...] = ()


class ChoiceText:
    """Feed each step's tokens; mutates itself only. After a finish, feeding is an error.

    A stop token (EOS or `stop_token_ids`, reported as finish "stop" by the Batcher)
    and a stop string are left out of the text unless `include_stop_str_in_output`; the
    stop token's logprobs entry too, so the entries' tokens spell the text (OpenAI's
    contract)."""

    def __init__(
        self,
        decoder: Decoder,
        params: SamplingParams,
        *,
        tokens_as_ids: bool = False,
        wants_pieces: bool = False,
    ) -> None:
        self._decoder = decoder
        self._wants_pieces = wants_pieces  # each token's text (a reasoning parser counts)
        self._tokens_as_ids = tokens_as_ids  # logprobs name tokens "token_id:N"
        self._params = params
        self._detokenizer = IncrementalDetokenizer(
            decoder, skip_special_tokens=params.skip_special_tokens
        )
        self._stop = StopMatcher(params.stop, include_stop=params.include_stop_str_in_output)
        self.num_tokens = 0
        self.finish_reason: FinishReason | None = None

    def feed(
        self,
        token_ids: Sequence[int],
        finish_reason: FinishReason | None,
        logprobs: Sequence[TokenLogprobs] | None = None,
    ) -> ChoiceUpdate:
        """One step's tokens, taken one at a time as steps of one token would be, so a
        stop string ends the choice at the token that completed it: tokens after it in
        the same step (accepted drafts) give no text and no logprobs and are not counted."""
        if len(token_ids) > 1 and self._takes_whole(finish_reason, logprobs):
            text = self._detokenizer.push_whole(token_ids)
            if text is not None:  # (None: a character split at the end, token by token)
                self.num_tokens += len(token_ids)
                return ChoiceUpdate(text=text, finish_reason=None, num_tokens=len(token_ids))
        pieces, entries = list[str](), list[TokenText]()
        for i, token in enumerate(token_ids):
            last = i == len(token_ids) - 1
            one = None if logprobs is None else (logprobs[i],)
            update = self._push((token,), finish_reason if last else None, one)
            pieces.append(update.text)
            entries += list(update.logprobs or ())
            if update.finish_reason is not None or last:
                return ChoiceUpdate(
                    text="".join(pieces), finish_reason=update.finish_reason,
                    stop_string=update.stop_string,
                    logprobs=None if logprobs is None else tuple(entries), num_tokens=i + 1,
                    pieces=tuple(pieces),
                )  # fmt: skip
        return self._push((), finish_reason, logprobs)

    def _takes_whole(
        self, finish_reason: FinishReason | None, logprobs: Sequence[TokenLogprobs] | None
    ) -> bool:
        """Whether a feed of several tokens gives the same text decoded at once: no stop
        string could end it early, no finish to handle, no logprobs or pieces wanted."""
        return (
            finish_reason is None
            and logprobs is None
            and not self._wants_pieces
            and not self._stop.has_stops
            and self.finish_reason is None
        )

    def _push(
        self,
        token_ids: Sequence[int],
        finish_reason: FinishReason | None,
        logprobs: Sequence[TokenLogprobs] | None,
    ) -> ChoiceUpdate:
        if self.finish_reason is not None:
            raise ValueError("this choice already finished")
        self.num_tokens += len(token_ids)
        texts = (
            None
            if logprobs is None
            else tuple(self._as_text(t, lp) for t, lp in zip(token_ids, logprobs, strict=True))
        )
        visible = token_ids
        if finish_reason is FinishReason.STOP and not self._params.include_stop_str_in_output:
            visible = token_ids[:-1]  # the stop token is not text, nor a logprobs entry
            texts = None if texts is None else texts[:-1]
        text = self._detokenizer.push(visible)
        if finish_reason is not None:
            text += self._detokenizer.flush()
        result = self._stop.push(text)
        if result.is_stopped:
            self.finish_reason = FinishReason.STOP
            return ChoiceUpdate(
                text=result.text, finish_reason=FinishReason.STOP, stop_string=result.stop,
                logprobs=texts,
            )  # fmt: skip
        if finish_reason is not None:
            self.finish_reason = finish_reason
            return ChoiceUpdate(
                text=result.text + self._stop.flush(), finish_reason=finish_reason, logprobs=texts
            )
        return ChoiceUpdate(text=result.text, finish_reason=None, logprobs=texts)

    @property
    def wants_logprobs(self) -> bool:
        return self._params.logprobs is not None

    def prompt_tokens(
        self, prompt_ids: Sequence[int], entries: Sequence[TokenLogprobs]
    ) -> tuple[PromptToken, ...]:
        """vLLM prompt_logprobs records for prompt tokens 1.. (`entries` in that order)."""
        return tuple(
            PromptToken(
                token_id=token_id,
                token=self._token(token_id),
                logprob=entry.logprob,
                rank=entry.rank or 1,
                top=tuple(
                    (t, self._token(t), lp, rank + 1) for rank, (t, lp) in enumerate(entry.top)
                ),
            )
            for token_id, entry in zip(prompt_ids[1:], entries, strict=True)
        )

    def echo_logprobs(
        self, prompt_ids: Sequence[int], entries: Sequence[TokenLogprobs]
    ) -> tuple[TokenText, ...]:
        """The echoed prompt's tokens as logprob entries; the first has no logprob."""
        first = TokenText(token=self._token(prompt_ids[0]), logprob=None)
        rest = (self._as_text(t, e) for t, e in zip(prompt_ids[1:], entries, strict=True))
        return (first, *rest)

    def _as_text(self, token_id: int, logprobs: TokenLogprobs) -> TokenText:
        top = tuple((self._token(t), lp) for t, lp in logprobs.top)
        return TokenText(token=self._token(token_id), logprob=logprobs.logprob, top=top)

    def _token(self, token_id: int) -> str:
        if self._tokens_as_ids:
            return f"token_id:{token_id}"
        return self._decoder.decode([token_id], skip_special_tokens=False)
