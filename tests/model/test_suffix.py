"""Suffix decoding's index: longest matches, the most frequent continuation while it
holds its share, responses of finished requests, and its bounds."""

from __future__ import annotations

import dataclasses

from atom.model.speculation.suffix import SuffixIndex
from atom.vocabulary.speculative import SpeculativeConfig

CONFIG = SpeculativeConfig(method="suffix", num_speculative_tokens=8, max_tree_depth=24)


def index(**overrides: object) -> SuffixIndex:
    return SuffixIndex(dataclasses.replace(CONFIG, **overrides))  # type: ignore[arg-type]


def test_the_longest_match_decides_and_its_continuation_is_drafted() -> None:
    s = index()
    #         "1 2 3" is followed by 4 5 once; "9 2 3" by 7 7 twice
    tokens = [1, 2, 3, 4, 5, 9, 2, 3, 7, 7, 0, 9, 2, 3, 7, 7, 0, 1, 2, 3]
    assert s.propose("a", tokens, 8) == (4, 5, 9, 2, 3, 7, 7, 0)[:3]  # factor 1: 3 matched
    assert s.propose("a", [*tokens, 4], 8)[:3] == (5, 9, 2)


def test_the_most_frequent_continuation_wins_while_it_holds_its_share() -> None:
    tokens = [8, 1, 5, 8, 1, 5, 8, 1, 6, 8, 1, 7, 8, 1]
    assert index(min_token_prob=0.1).propose("a", tokens, 1) == (5,)  # 5 twice, 6 and 7 once
    assert index(min_token_prob=0.6).propose("a", tokens, 1) == ()  # 5 has half the places


def test_a_finished_response_drafts_for_a_later_request() -> None:
    s = index()
    answer = [40, 41, 42, 43, 44, 45]
    s.propose("a", [1, 2, 40, 41], 4)
    s.finish("a", answer)
    assert s.propose("b", [9, 9, 40, 41], 4) == (42, 43)  # two matched: two drafts
    assert s.propose("b", [9, 9, 40, 41, 42, 43], 4) == (44, 45)


def test_responses_beyond_the_limit_are_forgotten_and_the_index_stays_bounded() -> None:
    s = index(max_cached_requests=2)
    for i in range(5):
        s.propose(f"r{i}", [i, 100 + i], 2)
        s.finish(f"r{i}", [100 + i, 200 + i, 300 + i])
    assert s.propose("x", [103, 200 + 3], 2) == (303,)
    assert s.propose("y", [100, 200], 2) == ()  # r0's response is gone
    places = [p for ps in s._places.values() for p in ps]
    assert {doc for doc, _ in places} <= set(s._docs)  # nothing points at a dropped document
    s.finish("x", [])
    s.finish("y", [])
    assert len(s._docs) == 2  # the two cached responses only
