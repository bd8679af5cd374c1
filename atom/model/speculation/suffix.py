"""Suffix decoding: draft the continuation that most often followed the sequence's
longest matching suffix, in its own tokens and in the responses of recent requests.

Every document (a running sequence's tokens, a finished one's response) is indexed by
its 1-, 2- and 4-grams, each keeping its latest `MAX_PLACES` places. A proposal looks
up the longest of those that ends the sequence, measures how far back each place
matches (up to `max_tree_depth` tokens) and keeps the longest matches; then it walks
forward from all of them at once: the most frequent next token is drafted while its
share of the places that go on is at least `min_token_prob`, keeping only the places
that agreed, for at most `max_spec_factor` times the match's length. Agent loops and
code edits repeat earlier answers, which is where this wins.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

from atom.vocabulary.speculative import SpeculativeConfig

PROBES = (4, 2, 1)  # n-gram lengths indexed, longest first
MAX_PLACES = 32  # places kept per n-gram (the latest)
Place = tuple[int, int]  # (document id, index of the token after the n-gram)


class SuffixIndex:
    """One per Scheduler, for every sequence it runs. Bounded: `max_cached_requests`
    finished responses, then the oldest is unindexed."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self._depth = config.max_tree_depth
        self._max_cached = config.max_cached_requests
        self._factor = config.max_spec_factor
        self._min_share = config.min_token_prob
        self._docs: dict[int, list[int]] = {}
        self._num_indexed: dict[int, int] = {}  # tokens of a document already indexed
        self._places: dict[tuple[int, ...], list[Place]] = {}
        self._live: dict[str, int] = {}  # running sequence → its document
        self._cached: deque[int] = deque()  # finished responses, oldest first
        self._next_id = 0

    def propose(self, seq_id: str, token_ids: Sequence[int], num_tokens: int) -> tuple[int, ...]:
        doc = self._live.get(seq_id)
        if doc is None:
            doc = self._live[seq_id] = self._add([])
        tokens = self._docs[doc]
        tokens.extend(token_ids[len(tokens) :])
        self._index(doc, len(tokens) - 1)  # not the suffix itself: it has no sequel
        places, length = self._longest_matches(tokens)
        return self._walk(places, min(num_tokens, int(self._factor * length)))

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        """Keep the response for later requests; drop the running document."""
        doc = self._live.pop(seq_id, None)
        if doc is not None:
            self._drop(doc)
        if output_ids:
            cached = self._add(list(output_ids))
            self._index(cached, len(output_ids))
            self._cached.append(cached)
            if len(self._cached) > self._max_cached:
                self._drop(self._cached.popleft())

    def _longest_matches(self, tokens: list[int]) -> tuple[list[Place], int]:
        """The places whose preceding tokens match the end of `tokens` longest, and
        that length (up to the tree depth); ([], 0) when nothing matches."""
        for n in PROBES:
            places = (
                self._places.get(tuple(tokens[len(tokens) - n :])) if n <= len(tokens) else None
            )
            if places:
                lengths = [self._match_length(tokens, place) for place in places]
                best = max(lengths)
                return [p for p, k in zip(places, lengths, strict=True) if k == best], best
        return [], 0

    def _match_length(self, tokens: list[int], place: Place) -> int:
        doc, after = self._docs[place[0]], place[1]
        length = 0
        limit = min(self._depth, after, len(tokens))
        while length < limit and doc[after - 1 - length] == tokens[-1 - length]:
            length += 1
        return length

    def _walk(self, places: list[Place], num_tokens: int) -> tuple[int, ...]:
        drafts: list[int] = []
        while len(drafts) < num_tokens:
            going = [(d, i) for d, i in places if i < len(self._docs[d])]
            if not going:
                break
            token, count = Counter(self._docs[d][i] for d, i in going).most_common(1)[0]
            if count < self._min_share * len(going):
                break
            drafts.append(token)
            places = [(d, i + 1) for d, i in going if self._docs[d][i] == token]
        return tuple(drafts)

    def _add(self, tokens: list[int]) -> int:
        doc, self._next_id = self._next_id, self._next_id + 1
        self._docs[doc], self._num_indexed[doc] = tokens, 0
        return doc

    def _index(self, doc: int, stop: int) -> None:
        """Index the n-grams of `doc` that end before token `stop`."""
        tokens = self._docs[doc]
        for end in range(self._num_indexed[doc], stop):
            for n in PROBES:
                if n <= end + 1:
                    places = self._places.setdefault(tuple(tokens[end - n + 1 : end + 1]), [])
                    places.append((doc, end + 1))
                    if len(places) > 2 * MAX_PLACES:  # trimmed now and then, not each time
                        del places[:-MAX_PLACES]
        self._num_indexed[doc] = max(self._num_indexed[doc], stop)

    def _drop(self, doc: int) -> None:
        """Unindex a document and forget it."""
        tokens = self._docs.pop(doc)
        for end in range(self._num_indexed.pop(doc)):
            for n in PROBES:
                key = tuple(tokens[end - n + 1 : end + 1])
                places = self._places.get(key) if n <= end + 1 else None
                if places is not None and (doc, end + 1) in places:
                    places.remove((doc, end + 1))
                    if not places:
                        del self._places[key]
