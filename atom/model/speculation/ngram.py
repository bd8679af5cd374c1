"""n-gram (prompt lookup) proposals: continue the sequence the way it continued before.

The index maps each n-gram of the sequence (n from `min_n` to `max_n`) to where its
latest occurrence ends; it grows with the sequence, so a proposal costs one lookup a
length, not a scan of the context.
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """One sequence's n-gram index. Owned by the Scheduler's `Sequence`; token ids only
    ever grow (a preempted sequence keeps its index: its tokens do not change)."""

    def __init__(self, *, min_n: int, max_n: int) -> None:
        self._sizes = range(max_n, min_n - 1, -1)  # the longest match wins
        self._ends: dict[tuple[int, ...], int] = {}  # n-gram → end index of its latest use
        self._num_indexed = 0  # n-grams ending before this index are in `_ends`

    def propose(self, token_ids: Sequence[int], num_tokens: int) -> tuple[int, ...]:
        """Up to `num_tokens` tokens that followed the latest earlier occurrence of the
        longest suffix of `token_ids` found; () when no suffix occurred before."""
        last = len(token_ids) - 1
        self._index(token_ids, last)  # the suffix itself must not match itself
        for n in self._sizes:
            if n > last:
                continue
            end = self._ends.get(tuple(token_ids[last - n + 1 :]))
            if end is not None:
                return tuple(token_ids[end + 1 : end + 1 + num_tokens])
        return ()

    def _index(self, token_ids: Sequence[int], stop: int) -> None:
        """Index the n-grams ending at positions [_num_indexed, stop)."""
        for end in range(self._num_indexed, stop):
            for n in self._sizes:
                if n <= end + 1:
                    self._ends[tuple(token_ids[end - n + 1 : end + 1])] = end
        self._num_indexed = max(self._num_indexed, stop)
