"""n-gram proposals and `--speculative-config` parsing."""

from __future__ import annotations

import random

import pytest

from atom.model.speculation.ngram import NgramIndex
from atom.vocabulary.speculative import SpeculativeConfig, parse_speculative_config


def brute_force(tokens: list[int], min_n: int, max_n: int, k: int) -> tuple[int, ...]:
    """The continuation of the latest earlier occurrence of the longest suffix."""
    last = len(tokens) - 1
    for n in range(max_n, min_n - 1, -1):
        if n > last:
            continue
        suffix = tokens[last - n + 1 :]
        for end in range(last - 1, n - 2, -1):
            if tokens[end - n + 1 : end + 1] == suffix:
                return tuple(tokens[end + 1 : end + 1 + k])
    return ()


def test_the_longest_suffix_wins_and_its_latest_occurrence() -> None:
    index = NgramIndex(min_n=1, max_n=3)
    #         0  1  2  3  4  5  6  7  8  9
    tokens = [1, 2, 3, 9, 2, 3, 4, 1, 2, 3]
    # "1 2 3" occurred at 0..2, followed by 9 2 3 4; "2 3" later at 4..5 loses to it
    assert index.propose(tokens, 4) == (9, 2, 3, 4)
    tokens += [7]  # "7" never occurred: no proposal
    assert index.propose(tokens, 4) == ()
    tokens += [2]  # "7 2" no; "2" latest at 8, followed by 3 7 2
    assert index.propose(tokens, 4) == (3, 7, 2)


def test_the_index_grows_with_the_sequence_as_a_scan_would_find() -> None:
    rng = random.Random(3)
    for min_n, max_n in ((1, 1), (1, 3), (2, 5), (5, 5)):
        index = NgramIndex(min_n=min_n, max_n=max_n)
        tokens = [rng.randrange(6) for _ in range(5)]
        for _ in range(300):
            assert index.propose(tokens, 4) == brute_force(tokens, min_n, max_n, 4)
            tokens.extend(rng.randrange(6) for _ in range(rng.randrange(1, 4)))


def test_config_defaults_follow_vllm() -> None:
    config = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 3}')
    assert config == SpeculativeConfig(
        method="ngram", num_speculative_tokens=3, prompt_lookup_min=5, prompt_lookup_max=5
    )
    raw = '{"method": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_max": 4, '
    one = parse_speculative_config(raw + '"disable_by_batch_size": 8}')
    assert one is not None and (one.prompt_lookup_min, one.prompt_lookup_max) == (4, 4)
    assert one.disable_by_batch_size == 8
    suffix = parse_speculative_config('{"method": "suffix"}')
    assert suffix is not None and suffix.num_speculative_tokens == suffix.max_tree_depth == 24
    assert (suffix.max_cached_requests, suffix.min_token_prob) == (1000, 0.1)
    assert parse_speculative_config(None) is None and parse_speculative_config(" ") is None
    raw = '{"model": "/m/draft", "num_speculative_tokens": 4, "quantization": "int4"}'
    assert parse_speculative_config(raw) == SpeculativeConfig(
        method="draft_model", num_speculative_tokens=4, model="/m/draft", quantization="int4"
    )  # a `model` without a method is a draft model, as in vLLM


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "not JSON"),
        ("[1]", "expected a JSON object"),
        ('{"num_speculative_tokens": 0}', "num_speculative_tokens must be a positive"),
        ('{"method": "ngram"}', "num_speculative_tokens must be a positive"),
        ('{"num_speculative_tokens": true}', "num_speculative_tokens must be a positive"),
        ('{"num_speculative_tokens": 2, "typo": 1}', "unknown key 'typo'"),
        ('{"method": "eagle", "num_speculative_tokens": 2}', "method must be one of"),
        ('{"method": "draft_model", "num_speculative_tokens": 2}', "needs `model`"),
        ('{"model": "/d", "num_speculative_tokens": 2, "prompt_lookup_max": 2}', "unknown key"),
        ('{"model": "/d"}', "num_speculative_tokens must be a positive"),
        ('{"model": "/d", "num_speculative_tokens": 2, "quantization": 4}', "must be a string"),
        ('{"method": "suffix", "prompt_lookup_max": 2}', "unknown key 'prompt_lookup_max'"),
        ('{"method": "suffix", "suffix_decoding_min_token_prob": 2}', "above 1"),
        ('{"num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}', "above"),
    ],
)
def test_config_errors_name_the_key(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_speculative_config(raw)
