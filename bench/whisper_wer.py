"""Word error rate of the packaged Whisper base on 20 known sentences spoken by Debian's
espeak-ng: `python -m bench.whisper_wer [--out FILE]`.

Each sentence is spoken to a WAV file, decoded (atom/audio/decode.py) and transcribed
in one batch by ATOM's window decoding (atom/model/whisper: greedy, English given), and
by CTranslate2 on the packages' own model file with its float32 and int8 compute types
(int8 is faster-whisper's CPU default), greedy too. The word error rate is the word-level
edit distance between the sentence and the transcript over the sentence's words, after
lowercasing and dropping punctuation. Prints each engine's rate and the transcripts
that differ from their sentence.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path
from typing import Any

import ctranslate2
import torch
from transformers import WhisperTokenizer

from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.package import ctranslate2_folder, transformers_folder
from atom.model.whisper.runtime import WhisperRuntime, load_whisper
from atom.vocabulary.config import Settings
from bench.run import machine, publish
from tests.audio.media import spoken

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "A journey of a thousand miles begins with a single step.",
    "The rain in Spain stays mainly in the plain.",
    "Every morning the baker pulls fresh bread from the oven.",
    "The harbour was quiet until the storm rolled in from the west.",
    "Please remember to close the window before you leave the house.",
    "Seven green bottles were standing on the wall.",
    "The meeting has been moved to Thursday afternoon at three.",
    "My grandfather planted apple trees behind the old barn.",
    "Turn left at the second traffic light and keep going straight.",
    "The library will be closed for repairs next week.",
    "Children were playing football in the park after school.",
    "We need two eggs, a cup of milk and some flour.",
    "The train to London leaves from platform nine.",
    "Scientists discovered a new species of frog in the rainforest.",
    "Could you please send me the report by Friday?",
    "The museum opens at ten o'clock every day except Monday.",
    "He forgot his umbrella and got soaked on the way home.",
    "The price of coffee has gone up again this year.",
)

TASK = WindowTask(language="en")


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    row = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, start=1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hypothesis, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[-1]


def word_error_rate(transcripts: list[str]) -> float:
    errors = sum(
        edit_distance(words(s), words(t)) for s, t in zip(SENTENCES, transcripts, strict=True)
    )
    return errors / sum(len(words(s)) for s in SENTENCES)


def atom_transcripts(runtime: WhisperRuntime, samples: list[Any]) -> list[str]:
    """The sentences' windows decoded together."""
    windows = [WindowDecode(runtime.tokens, TASK, max_tokens=runtime.max_tokens) for _ in samples]
    runtime.decode(windows, samples)
    return [runtime.tokenizer.decode(w.generated).strip() for w in windows]


def ct2_transcripts(
    ct2_dir: Path,
    features: torch.Tensor,
    prompt: list[int],
    compute: str,
    tokenizer: WhisperTokenizer,
) -> list[str]:
    model = ctranslate2.models.Whisper(
        str(ct2_dir), device="cpu", compute_type=compute, intra_threads=torch.get_num_threads()
    )
    results = model.generate(
        ctranslate2.StorageView.from_array(features.numpy()), [prompt] * len(features), beam_size=1
    )
    return [tokenizer.decode(r.sequences_ids[0]).strip() for r in results]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    folder = transformers_folder(Settings().cache_dir)
    samples = [spoken(text) for text in SENTENCES]
    runtime = load_whisper(folder, num_slots=len(samples))
    tokenizer = runtime.tokenizer
    # the prompt ATOM's windows begin with, for CTranslate2 to begin with too
    prompt = WindowDecode(runtime.tokens, TASK, max_tokens=runtime.max_tokens).first_feed()
    extractor = runtime.extractor
    features = extractor(
        samples, sampling_rate=runtime.sample_rate, return_tensors="pt"
    ).input_features
    with tempfile.TemporaryDirectory() as work:
        ct2_dir = ctranslate2_folder(Path(work))
        found = {
            "atom float32": atom_transcripts(runtime, samples),
            "ctranslate2 float32": ct2_transcripts(ct2_dir, features, prompt, "float32", tokenizer),
            "ctranslate2 int8": ct2_transcripts(ct2_dir, features, prompt, "int8", tokenizer),
        }
    report: dict[str, Any] = {
        "machine": machine(),
        "sentences": len(SENTENCES),
        "words": sum(len(words(s)) for s in SENTENCES),
        "word_error_rate": {name: round(word_error_rate(t), 4) for name, t in found.items()},
        "misheard": {
            name: [t for s, t in zip(SENTENCES, ts, strict=True) if words(s) != words(t)]
            for name, ts in found.items()
        },
    }
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
