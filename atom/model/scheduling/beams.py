"""The Scheduler's beam searches (vLLM's `use_beam_search`), over the paged cache.

A prompt starts as one beam, a greedy sequence whose step brings its K most likely
next tokens (atom/model/scheduling/beam_search.py ranks them). Once every running
beam of the prompt has its sample of a step, the search moves on: the beams that go
on continue their parents; a parent's first child is the parent itself, the others
fork its blocks (full ones shared, the partial last one copied:
`KVCacheManager.fork`); parents with no child are dropped. Beams may be preempted
and recomputed like any sequence; the group waits until each has its sample. When
the search is over, the kept hypotheses become the prompt's choices, best first, each
one TokensSampled with all its tokens.

Sampling settings (temperature, top-p, top-k, min-p, seed) do not apply: a beam's
scores are its log-probabilities after the logits processors (penalties, logit bias,
min_tokens), as transformers' `generate(num_beams=..., do_sample=False)` scores them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from atom.model.runner import Sampled
from atom.model.scheduling.beam_search import (
    Beam,
    BeamGroup,
    BeamSearchState,
    Candidate,
    Finished,
    num_candidates,
)
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.sequence import SeqOutput, Sequence, sequence_of
from atom.vocabulary.events import FinishReason, Submit

Ending = Callable[[Sequence, int, int], FinishReason | None]


class Beams:
    """Starts beam searches, moves them on as their beams' samples come, and answers."""

    def __init__(
        self,
        kv: KVCacheManager,
        seqs: dict[str, Sequence],
        remove: Callable[[str], object],
        ending: Ending,
    ) -> None:
        """`seqs`: the Scheduler's sequences (forks join them); `remove`: the
        Scheduler's removal; `ending(seq, token, 1)`: why `seq` would end with `token`."""
        self._kv, self._seqs, self._remove, self._ending = kv, seqs, remove, ending

    def start(self, submit: Submit, p_idx: int, eos: frozenset[int]) -> Sequence:
        """Prompt `p_idx`'s first beam: a greedy sequence asking for its K best tokens."""
        params, width = submit.params, submit.choices_per_prompt
        assert params.beam_search is not None
        ending_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else eos)
        k = num_candidates(width, len(ending_ids))
        row = replace(
            params, temperature=0.0, top_p=1.0, top_k=None, min_p=0.0,
            logprobs=max(k, params.logprobs or 0),
        )  # fmt: skip
        first = p_idx * width
        seq = sequence_of(submit, p_idx, first, row)
        state = BeamSearchState[Finished](width, params.beam_search, params.max_tokens, k)
        seq.group = BeamGroup(state, first, params.logprobs, [Beam(seq, 0.0)])
        self._seqs[seq.seq_id] = seq
        return seq

    def sampled(self, seq: Sequence, sample: Sampled) -> list[SeqOutput]:
        """A beam's sample of this step; once every beam has one, the search moves on,
        and its answers come when it is over."""
        group = seq.group
        assert group is not None
        if seq.num_output == 0 and sample.prompt_logprobs is not None:
            group.prompt_logprobs = sample.prompt_logprobs
        group.pending[seq.seq_id] = sample
        if not group.is_stepped:
            return []
        beams, k = group.beams, group.state.num_candidates
        selection = group.state.select(
            [b.score for b in beams],
            [self._top(group, b)[:k] for b in beams],
            lambda parent, token: self._ending(beams[parent].seq, token, 1) is not None,
            beams[0].seq.num_output,
            lambda c: self._finished(group, c),
        )
        if selection.is_done:
            for beam in beams:
                self._remove(beam.seq.seq_id)
            return self._answers(group)
        self._move_on(group, selection.running)
        group.pending.clear()
        return []

    @staticmethod
    def _top(group: BeamGroup, beam: Beam) -> tuple[tuple[int, float], ...]:
        logprobs = group.pending[beam.seq.seq_id].logprobs
        assert logprobs is not None
        return logprobs.top

    def _finished(self, group: BeamGroup, candidate: Candidate) -> Finished:
        parent = group.beams[candidate.parent]
        reason = self._ending(parent.seq, candidate.token_id, 1)
        assert reason is not None
        return (*parent.tokens, group.token(candidate)), reason

    def _move_on(self, group: BeamGroup, running: tuple[Candidate, ...]) -> None:
        """The next step's beams, best first: forks first (from their parents' tokens as
        they are), then each parent takes its best child's token; childless parents go."""
        beams = group.beams
        firsts: dict[int, int] = {}  # a parent's index → the rank of its best child
        moved: list[Beam | None] = [None] * len(running)
        for rank, c in enumerate(running):
            parent = beams[c.parent]
            if c.parent in firsts:
                child = self._fork(group, parent.seq, c.token_id)
                moved[rank] = Beam(child, c.score, (*parent.tokens, group.token(c)))
            else:
                firsts[c.parent] = rank
        for index, rank in firsts.items():
            c, parent = running[rank], beams[index]
            moved[rank] = Beam(parent.seq, c.score, (*parent.tokens, group.token(c)))
            parent.seq.token_ids.append(c.token_id)
        for index, beam in enumerate(beams):
            if index not in firsts:
                self._remove(beam.seq.seq_id)
        group.beams = [beam for beam in moved if beam is not None]

    def _fork(self, group: BeamGroup, parent: Sequence, token: int) -> Sequence:
        """A new beam continuing `parent` with `token`, sharing its blocks when it has
        them and one is free for the partial last block (else it recomputes)."""
        group.num_forks += 1
        child = replace(
            parent,
            seq_id=f"{parent.request_id}/{group.first_choice}.{group.num_forks}",
            token_ids=[*parent.token_ids, token],
            has_blocks=False,
            num_computed=0,
        )
        if parent.has_blocks and self._kv.fork(parent.seq_id, child.seq_id, parent.num_computed):
            child.has_blocks, child.num_computed = True, parent.num_computed
        self._seqs[child.seq_id] = child
        return child

    @staticmethod
    def _answers(group: BeamGroup) -> list[SeqOutput]:
        """The kept hypotheses as the prompt's choices, best first."""
        hypotheses = group.state.hypotheses
        assert len(hypotheses) == group.state.width, "a finished search keeps W hypotheses"
        root = group.beams[0].seq
        prompt = root.token_ids[: root.num_prompt_tokens]
        outputs = []
        for rank, hypothesis in enumerate(hypotheses):
            tokens, reason = hypothesis.beam
            choice = group.first_choice + rank
            seq = replace(
                root,
                seq_id=f"{root.request_id}/{choice}",
                choice_idx=choice,
                token_ids=[*prompt, *(t.token_id for t in tokens)],
                group=None,
            )
            output = SeqOutput(
                seq=seq,
                tokens=tokens,
                prompt_logprobs=group.prompt_logprobs,
                finish_reason=reason,
                is_first=True,
            )
            outputs.append(output)
        return outputs
