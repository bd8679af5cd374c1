"""Word timestamps (atom/model/whisper/alignment.py): the path and filter against plain
references, words split as Whisper's tokenizer writes them, and the packaged model's
word times against CTranslate2's own alignment (faster-whisper's) of the same words."""

from __future__ import annotations

import functools
import itertools
import shutil
from pathlib import Path

import ctranslate2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from atom.audio.decode import SAMPLE_RATE
from atom.model.whisper.alignment import dtw, median_filter, split_words, word_times
from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.package import ctranslate2_folder, transformers_folder
from atom.model.whisper.runtime import WhisperRuntime, load_whisper
from tests.audio.media import spoken


def cheapest(cost: np.ndarray) -> float:
    """The least total cost of a monotonic path from the first cell to the last,
    searched plainly (every path, memoized)."""

    @functools.cache
    def best(i: int, j: int) -> float:
        here = float(cost[i, j])
        if i == 0 and j == 0:
            return here
        before = []
        if i > 0 and j > 0:
            before.append(best(i - 1, j - 1))
        if i > 0:
            before.append(best(i - 1, j))
        if j > 0:
            before.append(best(i, j - 1))
        return here + min(before)

    return best(cost.shape[0] - 1, cost.shape[1] - 1)


def test_the_path_is_the_cheapest_and_moves_one_step_at_a_time() -> None:
    cost = np.array([[0, 5, 5, 5], [5, 0, 0, 5], [5, 5, 5, 0]], dtype=float)
    assert list(zip(*dtw(cost), strict=True)) == [(0, 0), (1, 1), (1, 2), (2, 3)]
    rng = np.random.default_rng(0)
    for shape in [(3, 9), (6, 6), (9, 4), (1, 5), (5, 1)]:
        cost = rng.normal(size=shape)
        rows, columns = dtw(cost)
        steps = list(zip(rows, columns, strict=True))
        assert steps[0] == (0, 0) and steps[-1] == (shape[0] - 1, shape[1] - 1)
        assert all(
            (r2 - r1, c2 - c1) in {(1, 1), (1, 0), (0, 1)}
            for (r1, c1), (r2, c2) in itertools.pairwise(steps)
        )
        assert cost[rows, columns].sum() == pytest.approx(cheapest(cost))


def test_the_median_filter_is_torchs_reflect_padded_one() -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 40))
    padded = F.pad(torch.from_numpy(x), (3, 3), mode="reflect")
    expected = padded.unfold(-1, 7, 1).median(dim=-1).values.numpy()
    np.testing.assert_array_equal(median_filter(x, 7), expected)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return transformers_folder(str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def runtime(folder: Path) -> WhisperRuntime:
    return load_whisper(folder, num_slots=1)


def test_words_split_at_spaces_with_their_punctuation(runtime: WhisperRuntime) -> None:
    decode = runtime.tokenizer.decode
    ids = runtime.tokenizer.encode(" Hello, world! It's 3.5 o'clock ¿sí?", add_special_tokens=False)
    words = split_words(ids, decode, "en")
    assert [w for w, _ in words] == [" Hello,", " world!", " It's", " 3.5", " o'clock", " ¿sí?"]
    assert [t for _, ids in words for t in ids] == ids
    chinese = runtime.tokenizer.encode("你好世界。", add_special_tokens=False)
    # without spaces a word is each token run that decodes to whole characters (你好 and
    # 世界 are one token each in Whisper's vocabulary), the full stop joined to the last
    assert [w for w, _ in split_words(chinese, decode, "zh")] == ["你好", "世界。"]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng")
def test_word_times_are_ctranslate2s_for_the_same_words(
    runtime: WhisperRuntime, tmp_path: Path
) -> None:
    audio = spoken("The quick brown fox jumps over the lazy dog.")
    task = WindowTask(language="en", words=True)
    window = WindowDecode(
        runtime.tokens, task, max_tokens=runtime.max_tokens, seconds=len(audio) / SAMPLE_RATE
    )
    runtime.decode([window], [audio])
    text = [t for t in window.generated if t < runtime.tokens.end_of_text]
    assert "".join(w.word for w in window.words) == runtime.tokenizer.decode(text)
    reference = ctranslate2.models.Whisper(
        str(ctranslate2_folder(tmp_path)), compute_type="float32"
    )
    features = runtime.extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")
    [aligned] = reference.align(
        ctranslate2.StorageView.from_array(features.input_features),
        window.start_sequence(),
        [text],
        len(audio) // runtime.extractor.hop_length,
    )
    rows, columns = zip(*aligned.alignments, strict=True)
    expected = word_times(split_words(text, runtime.tokenizer.decode, "en"), rows, columns)
    assert [w.word for w in window.words] == [w.word for w in expected]
    for got, want in zip(window.words, expected, strict=True):
        assert abs(got.start - want.start) <= 0.04 and abs(got.end - want.end) <= 0.04, (got, want)
    starts = [w.start for w in window.words]
    assert starts == sorted(starts) and window.words[-1].end <= len(audio) / SAMPLE_RATE + 0.02
