"""Beam search as transformers' `generate(num_beams=W, do_sample=False)` runs it, one
step at a time: pure arithmetic over each beam's most likely next tokens (no torch).

Each step every live beam of a prompt brings its `K` most likely next tokens with their
log-probabilities (`K = max(2, 1 + number of ending tokens) * W`: at least W of the K
best candidates go on, even when every beam's best few end it). Candidates are ranked by
the beam's cumulative log-probability plus their own. Among the K best:

- those ranked below W that end their beam (an end token, or the length limit) become
  finished hypotheses, scored `cumulative / generated_length ** length_penalty`; the W
  best hypotheses are kept;
- the W best that do not end go on as the next step's beams.

The search is over when every candidate ends, when `early_stopping` is True and W
hypotheses are kept, or when no running beam can beat the worst kept hypothesis:
judged at the current length (`early_stopping` False, transformers' heuristic) or, with
"never" and a positive length penalty, at the longest length allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from atom.model.runner import Sampled
from atom.vocabulary.events import FinishReason, TokenLogprobs
from atom.vocabulary.plan import BeamSearch

if TYPE_CHECKING:
    from atom.model.scheduling.sequence import Sequence

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Candidate:
    """Beam `parent` continued by `token_id`: `score` is its cumulative log-probability."""

    parent: int  # the beam's index in the step's beams
    token_id: int
    logprob: float
    score: float
    ends: bool = False


@dataclass(frozen=True, slots=True)
class Hypothesis(Generic[T]):
    """A finished beam: `score` is length-penalized; `beam` is what the caller kept of it."""

    score: float
    beam: T


@dataclass(frozen=True, slots=True)
class Selection:
    """One step's outcome: the beams that go on (best first, at most W) and whether the
    search is over (its answers are then the state's hypotheses)."""

    running: tuple[Candidate, ...]
    is_done: bool


def num_candidates(width: int, num_ending_tokens: int) -> int:
    """How many of each beam's most likely tokens a step needs (transformers' K)."""
    return max(2, 1 + num_ending_tokens) * width


@dataclass(slots=True)
class BeamSearchState(Generic[T]):
    """One prompt's search: its settings, the hypotheses kept so far (best first) and
    whether a running beam may still beat them."""

    width: int
    config: BeamSearch
    max_new_tokens: int
    num_candidates: int  # K: how many of each beam's most likely tokens a step brings
    hypotheses: list[Hypothesis[T]] = field(default_factory=list)
    can_improve: bool = True

    def select(
        self,
        scores: Seq[float],
        tops: Seq[Seq[tuple[int, float]]],
        ends: Callable[[int, int], bool],
        num_generated: int,
        keep: Callable[[Candidate], T],
    ) -> Selection:
        """Rank the candidates of beams with cumulative `scores` and most likely next
        tokens `tops` ((id, logprob), any order); `ends(parent, token)` says whether a
        candidate ends its beam, `num_generated` how many tokens every beam has, and
        `keep` what to hold of a candidate that finishes."""
        best = sorted(
            (
                Candidate(parent=b, token_id=t, logprob=lp, score=scores[b] + lp)
                for b, top in enumerate(tops)
                for t, lp in top
            ),
            key=lambda c: -c.score,
        )[: self.num_candidates]
        ranked = [replace(c, ends=ends(c.parent, c.token_id)) for c in best]
        running = tuple(c for c in ranked if not c.ends)[: self.width]
        self._finish(ranked[: self.width], num_generated + 1, keep)
        self._judge(running, num_generated + 1)
        full = len(self.hypotheses) == self.width
        is_done = (
            not self.can_improve
            or (self.config.early_stopping is True and full)
            or all(c.ends for c in ranked)
        )
        return Selection(running=running, is_done=is_done)

    def _finish(self, best: list[Candidate], length: int, keep: Callable[[Candidate], T]) -> None:
        """Keep the ending candidates among the W best, while the search takes more."""
        full = len(self.hypotheses) == self.width
        if not self.can_improve or (self.config.early_stopping is True and full):
            return
        penalty = length**self.config.length_penalty
        new = [Hypothesis(c.score / penalty, keep(c)) for c in best if c.ends]
        merged = sorted([*self.hypotheses, *new], key=lambda h: -h.score)
        self.hypotheses = merged[: self.width]

    def _judge(self, running: tuple[Candidate, ...], length: int) -> None:
        """Whether the best running beam may still beat the worst kept hypothesis
        (transformers' test; once it may not, it never may again)."""
        if not self.can_improve or len(self.hypotheses) < self.width:
            return
        if not running:
            self.can_improve = False
            return
        config = self.config
        if config.early_stopping == "never" and config.length_penalty > 0.0:
            length = self.max_new_tokens
        best = running[0].score / length**config.length_penalty
        self.can_improve = best > min(h.score for h in self.hypotheses)


@dataclass(frozen=True, slots=True)
class Beam:
    """A running beam: its sequence, cumulative log-probability and output tokens (with
    the logprobs the client asked for)."""

    seq: Sequence
    score: float
    tokens: tuple[Sampled, ...] = ()


Finished = tuple[tuple[Sampled, ...], FinishReason]  # a hypothesis: its tokens, why it ended


@dataclass(slots=True)
class BeamGroup:
    """One prompt's beam search, owned by the Scheduler: the running beams, the step's
    samples of those that ran it (the group moves on once every beam has one), and
    the choices its answers become (`first_choice` on, best first)."""

    state: BeamSearchState[Finished]
    first_choice: int
    logprobs: int | None  # the client's top alternatives a token (None: no logprobs)
    beams: list[Beam]
    pending: dict[str, Sampled] = field(default_factory=dict)
    prompt_logprobs: tuple[TokenLogprobs, ...] | None = None
    num_forks: int = 0

    @property
    def is_stepped(self) -> bool:
        """Every running beam has its sample of this step."""
        return len(self.pending) == len(self.beams)

    def token(self, candidate: Candidate) -> Sampled:
        """A candidate as an output token, with the logprobs the client asked for."""
        if self.logprobs is None:
            return Sampled(token_id=candidate.token_id)
        parent = self.pending[self.beams[candidate.parent].seq.seq_id]
        assert parent.logprobs is not None
        top = parent.logprobs.top[: self.logprobs]
        return Sampled(
            token_id=candidate.token_id,
            logprobs=TokenLogprobs(logprob=candidate.logprob, top=top),
        )
