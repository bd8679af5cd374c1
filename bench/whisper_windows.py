"""Whisper base decoding windows in process, ATOM against CTranslate2 (faster-whisper's
engine) side by side: `python -m bench.whisper_windows [--batch 1 8] [--out FILE]`.

The packaged Whisper base (atom/model/whisper/package.py) on sentences spoken by
Debian's espeak-ng, each padded to a 30-second window as Whisper takes it: ATOM's
`WindowBatch` (transformers' encoder, ATOM's slot decoder; float32, torch's threads)
and CTranslate2's `Whisper.generate` on the packages' own model file (float32, as
many threads), greedy, English given, no timestamps. Prints the seconds of speech
transcribed per second of wall time (the real-time factor's inverse) for each batch
size, and checks that both wrote the same tokens. No HTTP: the engine's work only.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import ctranslate2
import torch

from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.package import ctranslate2_folder, transformers_folder
from atom.model.whisper.runtime import WhisperRuntime, load_whisper
from atom.vocabulary.config import Settings
from bench.run import machine, publish
from bench.whisper_wer import SENTENCES as WER_SENTENCES
from tests.audio.media import spoken

SENTENCES = WER_SENTENCES[:8]
TASK = WindowTask(language="en")


def speech_features(runtime: WhisperRuntime) -> tuple[torch.Tensor, list[float]]:
    """Each sentence's features [n, 80, 3000] and its seconds of speech."""
    samples = [spoken(text) for text in SENTENCES]
    found = runtime.extractor(samples, sampling_rate=runtime.sample_rate, return_tensors="pt")
    return found.input_features, [len(s) / runtime.sample_rate for s in samples]


def atom_tokens(runtime: WhisperRuntime, features: torch.Tensor, batch: int) -> list[list[int]]:
    """Every window's tokens, `batch` windows decoding together at a time."""
    out = []
    for start in range(0, len(features), batch):
        chunk = [
            WindowDecode(runtime.tokens, TASK, max_tokens=runtime.max_tokens)
            for _ in features[start : start + batch]
        ]
        runtime.batch.start(chunk, features[start : start + batch])
        while runtime.batch.num_active:
            runtime.batch.step()
        out += [w.generated for w in chunk]
    return out


def ct2_tokens(
    model: Any, features: torch.Tensor, batch: int, prompt: list[int]
) -> list[list[int]]:
    out = []
    for start in range(0, len(features), batch):
        chunk = features[start : start + batch].numpy()
        results = model.generate(
            ctranslate2.StorageView.from_array(chunk), [prompt] * len(chunk), beam_size=1
        )
        out += [r.sequences_ids[0] for r in results]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    folder = transformers_folder(Settings().cache_dir)
    report: dict[str, Any] = {"machine": machine(), "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as work:
        runtime = load_whisper(folder, num_slots=max(args.batch))
        features, seconds = speech_features(runtime)
        ct2_dir = ctranslate2_folder(Path(work))
        # the prompt ATOM's windows begin with, for CTranslate2 to begin with too
        prompt = WindowDecode(runtime.tokens, TASK, max_tokens=runtime.max_tokens).first_feed()
        reference = ctranslate2.models.Whisper(
            str(ct2_dir),
            device="cpu",
            compute_type="float32",
            intra_threads=torch.get_num_threads(),
        )
        speech = sum(seconds)
        report["speech_seconds"] = round(speech, 2)
        for batch in args.batch:
            timings = {}
            found = {}
            for name, run in (
                ("atom", lambda b=batch: atom_tokens(runtime, features, b)),
                ("ctranslate2", lambda b=batch: ct2_tokens(reference, features, b, prompt)),
            ):
                start = time.perf_counter()
                found[name] = run()
                timings[name] = round(speech / (time.perf_counter() - start), 2)
            report[f"batch_{batch}"] = {
                "speech_seconds_per_second": timings,
                "same_tokens": found["atom"] == found["ctranslate2"],
            }
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
