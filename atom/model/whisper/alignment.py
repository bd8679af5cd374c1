"""Word timestamps: where each word of a decoded window lies in its audio, read from the
decoder's cross-attention, as OpenAI's whisper and CTranslate2 (faster-whisper) find it.

The window's text is fed again behind its start sequence and `<|notimestamps|>`, and
the attention logits of the model's alignment heads (its generation config names them:
the heads whose attention follows the speech) are kept for each token over the audio's
encoder frames (50 a second). Each head's weights are softmaxed over the frames the
audio fills, standardized over the tokens, smoothed along the frames by a median filter
of 7, and averaged over the heads; dynamic time warping then finds the path through
that matrix that is cheapest in negated attention. A token's time is where the path
first reaches its row; a word runs from the time of the token before its first to the
time of the token before the next word's (the attention that predicts a token sits on
the position before it). Punctuation joins the word it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from atom.model.whisper.decoding import WindowDecode, WordTime
from atom.model.whisper.slots import WhisperSlots

FRAMES_PER_SECOND = 50  # the encoder's positions a second of audio
MEDIAN_WIDTH = 7
# Languages written without spaces: a word is each character's tokens there.
UNSPACED = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
LEADING = "\"'“¿([{-"  # joins the next word
# joins the previous word (and the fullwidth comma, exclamation, question mark, colon)
TRAILING = "\"'.。,!?:”)]}、" + "\uff0c\uff01\uff1f\uff1a"


def attention_matrix(logits: np.ndarray, num_frames: int, skip: int) -> np.ndarray:
    """[tokens - skip - 1, frames]: the alignment heads' logits [heads, tokens, 1500]
    over the `num_frames` encoder frames the audio fills, softmaxed, standardized over
    the tokens, median-filtered along the frames, averaged over the heads; the first
    `skip` tokens (the start sequence) and the last (the end of text) dropped."""
    frames = max(1, min(num_frames, logits.shape[-1]))
    x = logits[:, :, :frames].astype(np.float64)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    x /= x.sum(axis=-1, keepdims=True)
    x = (x - x.mean(axis=-2, keepdims=True)) / x.std(axis=-2, keepdims=True)
    x = median_filter(x, MEDIAN_WIDTH)
    return np.asarray(x.mean(axis=0)[skip:-1])


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Each value the median of the `width` around it along the last axis, the edges
    reflected (as torch's and SciPy's `reflect`)."""
    half = width // 2
    if x.shape[-1] <= half:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1)


def dtw(cost: np.ndarray) -> tuple[list[int], list[int]]:
    """The cheapest monotonic path from the first cell of `cost` [rows, columns] to its
    last, each move one row, one column or both: its (row, column) cells in order. A
    tie prefers a move along the columns, then the diagonal over a move down."""
    rows, columns = cost.shape
    values = cost.tolist()
    inf = float("inf")
    total = [[inf] * (columns + 1) for _ in range(rows + 1)]
    came = [[2] * (columns + 1) for _ in range(rows + 1)]  # 0 diagonal, 1 down, 2 across
    total[0][0] = 0.0
    for j in range(1, columns + 1):
        for i in range(1, rows + 1):
            diagonal, down, across = total[i - 1][j - 1], total[i - 1][j], total[i][j - 1]
            if diagonal < down and diagonal < across:
                best, move = diagonal, 0
            elif down < diagonal and down < across:
                best, move = down, 1
            else:
                best, move = across, 2
            total[i][j] = values[i - 1][j - 1] + best
            came[i][j] = move
    for i in range(1, rows + 1):
        came[i][0] = 1
    path: list[tuple[int, int]] = []
    i, j = rows, columns
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = came[i][j]
        i, j = (i - 1, j - 1) if move == 0 else (i - 1, j) if move == 1 else (i, j - 1)
    path.reverse()
    return [r for r, _ in path], [c for _, c in path]


def row_times(rows: Sequence[int], columns: Sequence[int]) -> list[float]:
    """Each row's time: where the path first reaches it, in seconds."""
    times: list[float] = []
    for r, c in zip(rows, columns, strict=True):
        if r == len(times):
            times.append(c / FRAMES_PER_SECOND)
    return times


def split_words(
    tokens: Sequence[int], decode: Callable[[list[int]], str], language: str
) -> list[tuple[str, list[int]]]:
    """The text tokens as words: a new word at each token that starts with a space (in a
    language written without spaces, each whole character), punctuation joined to its
    neighbour. Each word is (its text, its tokens)."""
    pieces = _characters(tokens, decode)
    if language in UNSPACED:
        return _joined_punctuation(pieces, decode)
    words: list[tuple[str, list[int]]] = []
    for text, ids in pieces:
        if words and not text.startswith(" "):
            joined = [*words[-1][1], *ids]
            words[-1] = (decode(joined), joined)
        else:
            words.append((text, ids))
    return _joined_punctuation(words, decode)


def _characters(
    tokens: Sequence[int], decode: Callable[[list[int]], str]
) -> list[tuple[str, list[int]]]:
    """The tokens in runs that decode to whole characters (a character's UTF-8 bytes
    may span tokens)."""
    out: list[tuple[str, list[int]]] = []
    held: list[int] = []
    for token in tokens:
        held.append(token)
        text = decode(held)
        if "\ufffd" not in text:
            out.append((text, held))
            held = []
    if held:
        out.append((decode(held), held))
    return out


def _joined_punctuation(
    words: list[tuple[str, list[int]]], decode: Callable[[list[int]], str]
) -> list[tuple[str, list[int]]]:
    """A word of closing punctuation joins the word before it; one of opening
    punctuation, the word after it."""
    out: list[tuple[str, list[int]]] = []
    opening = False  # the last word kept is opening punctuation
    for text, ids in words:
        bare = text.strip()
        if out and bare and all(c in TRAILING for c in bare) and not opening:
            joined = [*out[-1][1], *ids]
            out[-1] = (decode(joined), joined)
        elif out and opening:
            joined = [*out[-1][1], *ids]
            out[-1] = (decode(joined), joined)
            opening = False
        else:
            out.append((text, ids))
            opening = bool(bare) and all(c in LEADING for c in bare)
    return out


def word_times(
    words: list[tuple[str, list[int]]], rows: Sequence[int], columns: Sequence[int]
) -> list[WordTime]:
    """Each word's start and end from the path (rows: the `<|notimestamps|>` token's,
    then each text token's)."""
    times = row_times(rows, columns)
    out: list[WordTime] = []
    at = 0  # the row of the token before the word's first
    for word, ids in words:
        end_row = min(at + len(ids), len(times) - 1)
        out.append(WordTime(word, times[min(at, len(times) - 1)], times[end_row], tuple(ids)))
        at += len(ids)
    return out


@dataclass(frozen=True, slots=True)
class Aligner:
    """A model's alignment heads ((layer, head) pairs) and its tokenizer's decode: the
    words of a window that has ended, while its slot still holds its encoder states."""

    heads: tuple[tuple[int, int], ...]
    decode: Callable[[list[int]], str]

    def words(self, slots: WhisperSlots, slot: int, window: WindowDecode) -> list[WordTime]:
        tokens = window.tokens
        text = [t for t in window.generated if t < tokens.end_of_text]
        if not text:
            return []
        start = window.start_sequence()
        fed = [*start, tokens.no_timestamps, *text, tokens.end_of_text]
        found = slots.cross_logits(slot, fed, frozenset(layer for layer, _ in self.heads))
        logits = torch.stack([found[layer][head] for layer, head in self.heads])
        frames = round(window.seconds * FRAMES_PER_SECOND)
        matrix = attention_matrix(logits.float().cpu().numpy(), frames, skip=len(start))
        rows, columns = dtw(-matrix)
        assert window.language is not None
        return word_times(split_words(text, self.decode, window.language), rows, columns)
