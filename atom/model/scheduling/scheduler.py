"""Scheduler: sequence bookkeeping and one token budget per step (pure, no trio, no torch).

Each step: every decoding sequence gets one token first (preempting the newest
sequences by recompute when blocks run out), then prefilling sequences get
what is left of the budget, oldest first; a prompt longer than the budget is
prefilled over several steps (chunked prefill). Choices after the first of a
request wait until the first has filled the prompt's blocks, then reuse them
through the prefix cache. "Oldest" is arrival order, or with `by_priority` a
request's priority first (lower first; the highest value is preempted first).

With speculation, a decoding sequence's chunk also carries drafts (n-gram, suffix or a
draft model's: `draft_requests`) when blocks and budget are left after every decode and
before any prefill; the runner returns the drafts it accepted and one token more. With
overlapped steps, a step is planned before the last one's tokens are known
(`schedule_ahead`).

With beam search a prompt's choices are beams (atom/model/scheduling/beams.py): they
step together, fork and drop between steps, and answer once the search is over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from atom.model.runner import Runner, Sampled, SeqChunk, StepPlan
from atom.model.scheduling.beams import Beams
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.sequence import (
    SeqOutput,
    Sequence,
    StepStats,
    is_stop_token,
    sequence_of,
)
from atom.model.speculation.proposer import DraftRequest, Proposer, make_proposer
from atom.vocabulary.events import DraftsVerified, FinishReason, Submit
from atom.vocabulary.images import spans
from atom.vocabulary.speculative import SpeculativeConfig


class Scheduler:
    def __init__(
        self,
        *,
        kv: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        by_priority: bool = False,
        speculation: SpeculativeConfig | None = None,
        draft: Runner | None = None,
        max_loras: int = 1,
    ) -> None:
        """`draft`: the draft model's runner, for a draft_model `speculation`;
        `max_loras`: adapters the running sequences may use at once (--max-loras)."""
        self.kv = kv
        self.max_loras = max_loras
        self.by_priority = by_priority
        self.speculation = speculation
        self.proposer: Proposer | None = (
            None if speculation is None else make_proposer(speculation, draft)
        )
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self._eos = eos_token_ids
        self._max_model_len = max_model_len
        self._seqs: dict[str, Sequence] = {}  # insertion order is arrival order
        self._released: list[str] = []  # removed sequences the runner may forget
        self.stats = StepStats()
        self._beams = Beams(kv, self._seqs, self._remove, self._ending)

    @property
    def num_seqs(self) -> int:
        return len(self._seqs)

    def can_admit(self, num_seqs: int) -> bool:
        return self.num_seqs + num_seqs <= self.max_num_seqs

    def add(self, submit: Submit) -> list[Sequence]:
        """Start one sequence per choice of `submit` (blocks come when it is scheduled);
        with beam search, one beam per prompt (more come as it forks)."""
        n = submit.choices_per_prompt
        if submit.params.beam_search is not None:
            prompts = range(len(submit.prompts))
            return [self._beams.start(submit, p_idx, self._eos) for p_idx in prompts]
        new = [
            sequence_of(submit, p_idx, p_idx * n + j, submit.params)
            for p_idx in range(len(submit.prompts))
            for j in range(n)
        ]
        self._seqs.update((s.seq_id, s) for s in new)
        return new

    def _remove(self, seq_id: str) -> Sequence | None:
        seq = self._seqs.pop(seq_id, None)
        if seq is not None:
            self.kv.free(seq_id)
            self._released.append(seq_id)
            if self.proposer is not None:
                self.proposer.finish(seq_id, seq.token_ids[seq.num_prompt_tokens :])
        return seq

    def take_released(self) -> list[str]:
        """The sequences removed since the last call: the runner may forget them."""
        released, self._released = self._released, []
        return released

    def drop(self, request_id: str, choice_idx: int | None = None) -> int:
        """Remove a request's sequences (those of one choice, given `choice_idx`); returns
        how many choices that ended. A beam search ends only with its whole request:
        its beams stand for all its choices."""
        ended = 0
        for seq in self._seqs_of(request_id):
            if seq.group is not None:
                if choice_idx is None:
                    is_first = seq is seq.group.beams[0].seq  # counts the group's choices once
                    ended += seq.group.state.width if is_first else 0
                    self._remove(seq.seq_id)
            elif choice_idx is None or choice_idx == seq.choice_idx:
                self._remove(seq.seq_id)
                ended += 1
        return ended

    def seq(self, seq_id: str) -> Sequence | None:
        return self._seqs.get(seq_id)

    def sequences(self) -> list[Sequence]:
        return list(self._seqs.values())

    def _seqs_of(self, request_id: str) -> list[Sequence]:
        return [s for s in self._seqs.values() if s.request_id == request_id]

    # --- planning ------------------------------------------------------------------

    def draft_requests(self) -> list[DraftRequest]:
        """What to ask the proposer before planning a step: each decoding sequence and
        how many drafts it may take (none while more than `disable_by_batch_size`
        sequences run, decoding or in their prompts: the batch fills the machine)."""
        spec = self.speculation
        if spec is None or len(self._seqs) > spec.disable_by_batch_size:
            return []
        decoding = [s for s in self._seqs.values() if s.is_decoding and s.group is None]
        requests = [DraftRequest(s.seq_id, s.token_ids, self._room(s, spec)) for s in decoding]
        return [r for r in requests if r.num_tokens > 0]

    def disk_wanted(self, on_disk: Callable[[int], bool]) -> list[int]:
        """The blocks on disk (`on_disk`) that the prefixes of sequences about to take
        their first blocks could use, to read before planning (each sequence is looked
        up once; prompt logprobs need every position computed)."""
        wanted: list[int] = []
        for seq in self._seqs.values():
            if seq.is_disk_checked or seq.has_blocks or seq.params.prompt_logprobs is not None:
                continue
            seq.is_disk_checked = True
            found = self.kv.disk_wanted(seq.token_ids, seq.prefix_salt, spans(seq.images), on_disk)
            wanted.extend(found)
        return list(dict.fromkeys(wanted))

    def schedule(self, drafts: Mapping[str, tuple[int, ...]] | None = None) -> StepPlan:
        """Plan one step within the token budget: decodes first (with the `drafts`
        proposed for them), then prefill chunks."""
        self.stats = StepStats()
        return self._with_prefills(self._with_drafts(self._schedule_decodes(), drafts or {}))

    def schedule_ahead(self, plan: StepPlan) -> StepPlan | None:
        """The step after `plan`, planned before `plan`'s tokens are known (every step
        before it recorded): each sequence `plan` samples feeds a placeholder for its
        token (atom/model/scheduling/ahead.py), then the prompts `plan` left out take
        what budget and free blocks are left, preempting nothing. None when that is not
        all it must do: a chunk of `plan` that stops mid-prompt or has drafts, a beam,
        a decoding sequence `plan` left out, no free block for a placeholder."""
        self.stats = StepStats()
        in_plan = {c.seq_id for c in plan.chunks}
        for other in self._seqs.values():
            if other.group is not None or (other.is_decoding and other.seq_id not in in_plan):
                return None
        chunks = []
        for chunk in plan.chunks:
            seq = self._seqs.get(chunk.seq_id)
            if seq is None:
                continue  # dropped (aborted) since `plan` was made: none after it
            if not chunk.needs_sample or chunk.num_draft_tokens:
                return None
            if seq.room(self._max_model_len) <= 1:
                continue  # the token from `plan` is its last
            length = len(seq.token_ids)
            if not self.kv.allocate(seq.seq_id, length + 1):
                return None
            chunks.append(self._chunk(seq, length, length, ahead=True))
        ahead = self._with_prefills(chunks, skip=in_plan)
        return ahead if ahead.chunks else None

    def _schedule_decodes(self) -> list[SeqChunk]:
        chunks: list[SeqChunk] = []
        for seq in [s for s in self._in_order() if s.is_decoding]:
            if not seq.has_blocks:
                continue  # preempted by an older sequence in this loop
            while not self.kv.allocate(seq.seq_id, len(seq.token_ids)):
                victim = self._newest_with_blocks()
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.has_blocks:
                chunks.append(self._chunk(seq, seq.num_computed, len(seq.token_ids)))
        return chunks[: self.max_num_batched_tokens]

    def _with_drafts(
        self, decodes: list[SeqChunk], drafts: Mapping[str, tuple[int, ...]]
    ) -> list[SeqChunk]:
        """The decode chunks, those with drafts extended by them while the budget and
        free blocks last (drafts never preempt anything)."""
        if not drafts:
            return decodes
        budget = self.max_num_batched_tokens - len(decodes)
        out = []
        for chunk in decodes:
            seq = self._seqs[chunk.seq_id]
            run = drafts.get(seq.seq_id, ())[: max(budget, 0)]
            if run and self.kv.allocate(seq.seq_id, len(seq.token_ids) + len(run)):
                chunk = self._chunk(seq, seq.num_computed, len(seq.token_ids), run)
                budget -= len(run)
            out.append(chunk)
        return out

    def _with_prefills(self, chunks: list[SeqChunk], skip: set[str] | None = None) -> StepPlan:
        """The step: `chunks`, then prompt chunks from the budget they leave, oldest first.
        `skip`: the sequences of a step whose tokens are not known yet (planning ahead),
        left out, as is preempting anything then."""
        planned = {c.seq_id for c in chunks} | (skip or set())
        budget = self.max_num_batched_tokens - sum(len(c.token_ids) for c in chunks)
        loras = self._running_loras()
        for seq in self._in_order():
            if budget <= 0:
                break
            if seq.seq_id in planned or self._waits_for_sibling(seq):
                continue
            new_lora = seq.lora is not None and seq.lora not in loras
            if not seq.has_blocks and new_lora and len(loras) >= self.max_loras:
                continue  # waits until a running adapter's sequences finish
            chunk = self._prefill_chunk(seq, budget, planned, may_preempt=skip is None)
            if chunk is None:
                break  # out of blocks: later prefills wait for the next step
            chunks.append(chunk)
            planned.add(seq.seq_id)
            if seq.lora is not None:
                loras.add(seq.lora)
            budget -= len(chunk.token_ids)
        return StepPlan(chunks=tuple(chunks), moves=self.kv.take_moves())

    def _room(self, seq: Sequence, spec: SpeculativeConfig) -> int:
        """How many drafts `seq` may take: as many as it accepted last time plus one (at
        most `num_speculative_tokens`), never past its max_tokens or the context limit,
        where every draft accepted plus the token after them must still fit."""
        limit = seq.num_draft_tokens
        limit = spec.num_speculative_tokens if limit is None else limit
        return min(limit, self.max_num_batched_tokens - 1, seq.room(self._max_model_len) - 1)

    def _prefill_chunk(
        self, seq: Sequence, budget: int, planned: set[str], *, may_preempt: bool
    ) -> SeqChunk | None:
        wants_prompt = seq.params.prompt_logprobs is not None
        if not seq.has_blocks:
            # Prompt logprobs need logits at every prompt position: no prefix hit.
            salt = (None, f"prompt-logprobs:{seq.seq_id}") if wants_prompt else seq.prefix_salt
            loaded = self.kv.num_loaded_blocks
            num_cached = self.kv.acquire_prefix(seq.seq_id, seq.token_ids, salt, spans(seq.images))
            seq.has_blocks, seq.num_computed = True, num_cached
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = num_cached
                self.stats.prefix_cache_queries += seq.num_prompt_tokens
                self.stats.prefix_cache_hits += num_cached
                disk_blocks = self.kv.num_loaded_blocks - loaded
                self.stats.prefix_cache_disk_hits += disk_blocks * self.kv.block_size
        end = min(len(seq.token_ids), seq.num_computed + budget)
        if wants_prompt and seq.num_computed == 0:
            end = len(seq.token_ids)  # one chunk, over budget if need be, to see every position
        while not self.kv.allocate(seq.seq_id, end):
            # Sequences with a chunk in this step's plan keep their blocks: the chunk
            # must not write into blocks handed to someone else.
            victim = self._newest_with_blocks(skip=planned)
            if victim is seq or not may_preempt:
                return None  # nothing newer to take blocks from: wait for the next step
            self._preempt(victim)
        return self._chunk(seq, seq.num_computed, end)

    def _waits_for_sibling(self, seq: Sequence) -> bool:
        """A later choice of a prompt waits until its first choice has computed the prompt's
        blocks, then takes them from the prefix cache; a beam that has its sample of
        this beam step waits for the others'."""
        if seq.group is not None:
            return seq.seq_id in seq.group.pending
        if seq.choice_idx == seq.first_sibling_idx or seq.has_blocks:
            return False
        first = self._seqs.get(f"{seq.request_id}/{seq.first_sibling_idx}")
        return first is not None and first.num_computed < first.num_prompt_tokens

    def _newest_with_blocks(self, *, skip: set[str] | frozenset[str] = frozenset()) -> Sequence:
        """The next to preempt: a beam waiting for its group's other beams first (it needs
        no blocks until the group moves on, and they may need its blocks), else the
        newest sequence."""
        order = self._in_order()
        waiting = [s for s in order if s.group is not None and s.seq_id in s.group.pending]
        candidates = (s for s in (*waiting, *reversed(order)) if s.has_blocks)
        return next(s for s in candidates if s.seq_id not in skip)

    def _in_order(self) -> list[Sequence]:
        """Who is served first: arrival order, or priority then arrival (a stable sort)."""
        seqs = list(self._seqs.values())
        return sorted(seqs, key=lambda s: s.priority) if self.by_priority else seqs

    def _preempt(self, seq: Sequence) -> None:
        """Free the sequence's blocks; it recomputes prompt and output later."""
        self.kv.free(seq.seq_id)
        seq.has_blocks, seq.num_computed = False, 0
        self.stats.num_preemptions += 1

    def _chunk(
        self, seq: Sequence, start: int, end: int, drafts: tuple[int, ...] = (), *, ahead=False
    ) -> SeqChunk:
        return seq.chunk(start, end, self.kv.table(seq.seq_id), drafts, ahead=ahead)

    def _commit(self, seq: Sequence) -> None:
        """Register the blocks the sequence's computed tokens filled (prefix cache); a
        block holding an image's placeholders is keyed by the image's hash too."""
        self.kv.commit(
            seq.seq_id, seq.token_ids, seq.num_computed, seq.prefix_salt, spans(seq.images)
        )

    def _running_loras(self) -> set[str]:
        """The adapters of the sequences that hold blocks (running, maybe mid-prompt)."""
        return {s.lora for s in self._seqs.values() if s.has_blocks and s.lora is not None}

    # --- results -------------------------------------------------------------------

    def update(self, plan: StepPlan, sampled: Mapping[str, tuple[Sampled, ...]]) -> list[SeqOutput]:
        """Record a finished step; finished sequences are removed and reported."""
        outputs = []
        for chunk in plan.chunks:
            seq = self._seqs.get(chunk.seq_id)
            if seq is None or not seq.has_blocks:
                continue
            if not chunk.needs_sample or seq.group is not None:
                seq.num_computed = chunk.start_pos + len(chunk.token_ids)
                self._commit(seq)
                if chunk.needs_sample:
                    outputs.extend(self._beams.sampled(seq, sampled[chunk.seq_id][0]))
                continue
            tokens = sampled[chunk.seq_id]
            output = self._append(seq, tokens, chunk.num_draft_tokens)
            # The chunk's own tokens and the accepted drafts are in the cache now, all
            # but the last token appended (a finish may cut the run short of them).
            computed = chunk.start_pos + len(chunk.token_ids) - chunk.num_draft_tokens
            seq.num_computed = min(computed + len(tokens) - 1, len(seq.token_ids) - 1)
            if chunk.num_draft_tokens:
                self.kv.truncate(seq.seq_id, len(seq.token_ids))  # rejected drafts' blocks
            self._commit(seq)
            if output.finish_reason is not None:  # its blocks stay cached for later hits
                self._remove(seq.seq_id)
            outputs.append(output)
        return outputs

    def _append(self, seq: Sequence, tokens: tuple[Sampled, ...], num_drafts: int) -> SeqOutput:
        """Append the step's tokens one by one, up to the first that ends the sequence
        (the caller removes a finished sequence once its blocks are committed)."""
        is_first = seq.num_output == 0
        reason = None
        taken = 0
        while reason is None and taken < len(tokens):
            seq.token_ids.append(tokens[taken].token_id)
            taken += 1
            reason = self._ending(seq, seq.token_ids[-1], 0)
        if num_drafts:  # propose one more than was accepted next time, up to the limit
            limit = self.speculation.num_speculative_tokens if self.speculation else 0
            seq.num_draft_tokens = min(limit, len(tokens))
        return SeqOutput(
            seq=seq,
            tokens=tokens[:taken],
            prompt_logprobs=tokens[0].prompt_logprobs if is_first else None,
            finish_reason=reason,
            is_first=is_first,
            drafts=DraftsVerified(num_draft_tokens=num_drafts, num_accepted_tokens=len(tokens) - 1)
            if num_drafts
            else None,
        )

    def _ending(self, seq: Sequence, last: int, num_more: int) -> FinishReason | None:
        """Why `seq` ends with `last` as its last token and `num_more` tokens more than it
        holds (a beam's candidate: 1); None if it goes on."""
        if is_stop_token(last, seq.params, self._eos):
            return FinishReason.STOP
        return FinishReason.LENGTH if seq.room(self._max_model_len) <= num_more else None
