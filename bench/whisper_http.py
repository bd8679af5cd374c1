"""Transcription through HTTP against faster-whisper, side by side in one run:
`python -m bench.whisper_http [--clips 16] [--concurrency 1 8] [--out FILE]`
(`pip install faster-whisper` first: the peer, with its CTranslate2 engine).

The clips are bench.whisper_wer's 20 sentences spoken by espeak-ng, three a clip (each
clip starts one sentence later, 0.6 s of silence between), as WAV files. ATOM serves
the packaged Whisper base (`--model whisper-base`, hypercorn as users run it) and is
asked through `/v1/audio/transcriptions` (json, English given: greedy, no timestamps);
faster-whisper transcribes the same WAV bytes in process (no HTTP: in its favour) from
the same model file, greedy (`beam_size=1`, the same fallback ladder and thresholds as
ATOM's at temperature 0, which are its defaults; no VAD, no timestamps,
each clip's text conditioning the next window as ATOM's), with 2 CPU threads and each of
its compute types on CPU. At each concurrency, that many clients take the clips in
turn (faster-whisper: that many threads, and as many CTranslate2 workers).

Reports, per engine and concurrency, seconds of audio transcribed a second of wall time
(the real-time factor's inverse: higher is faster) and the word error rate over the
clips' words (bench.whisper_wer's rule).
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from atom.audio.decode import SAMPLE_RATE
from atom.model.whisper.package import ctranslate2_folder
from bench.run import atom_server, machine, publish
from bench.whisper_wer import SENTENCES, edit_distance, words
from tests.audio.media import spoken, wav_of
from tests.e2e.conftest import free_port

LADDER = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]  # faster-whisper's default temperatures

GAP_S = 0.6
PER_CLIP = 3


def clips(count: int) -> list[tuple[str, bytes, float]]:
    """(reference text, WAV bytes, seconds) of each clip."""
    said = [spoken(text) for text in SENTENCES]
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    out = []
    for i in range(count):
        picked = [(i + k) % len(SENTENCES) for k in range(PER_CLIP)]
        audio = np.concatenate([part for j in picked for part in (said[j], gap)])
        text = " ".join(SENTENCES[j] for j in picked)
        out.append((text, wav_of(audio), len(audio) / SAMPLE_RATE))
    return out


def measured(
    transcribe: Callable[[bytes], str], taken: list[tuple[str, bytes, float]], concurrency: int
) -> dict[str, Any]:
    """Every clip through `transcribe` by `concurrency` clients: audio seconds a second,
    and the word error rate."""
    transcribe(taken[0][1])  # warm-up, not timed
    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        heard = list(pool.map(transcribe, [audio for _, audio, _ in taken]))
    wall = time.perf_counter() - began
    errors = sum(
        edit_distance(words(t), words(h)) for (t, _, _), h in zip(taken, heard, strict=True)
    )
    return {
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "audio_s_per_s": round(sum(s for _, _, s in taken) / wall, 2),
        "word_error_rate": round(errors / sum(len(words(t)) for t, _, _ in taken), 4),
    }


def atom_levels(taken: list[tuple[str, bytes, float]], levels: list[int]) -> list[dict[str, Any]]:
    port = free_port()
    args = argparse.Namespace(atom_env=["ATOM_MODEL=whisper-base"], model=None)
    with atom_server(port, args, {}), httpx.Client(timeout=600) as client:
        url = f"http://127.0.0.1:{port}/v1/audio/transcriptions"

        def transcribe(audio: bytes) -> str:
            r = client.post(url, files={"file": ("clip.wav", audio)}, data={"language": "en"})
            r.raise_for_status()
            return str(r.json()["text"])

        return [measured(transcribe, taken, c) for c in levels]


def faster_whisper_levels(
    folder: Path, compute: str, taken: list[tuple[str, bytes, float]], levels: list[int]
) -> list[dict[str, Any]]:
    from faster_whisper import WhisperModel

    out = []
    for c in levels:
        model = WhisperModel(
            str(folder), device="cpu", compute_type=compute, cpu_threads=2, num_workers=c
        )

        def transcribe(audio: bytes, model: Any = model) -> str:
            segments, _ = model.transcribe(
                io.BytesIO(audio),
                language="en",
                beam_size=1,
                temperature=LADDER,  # its default, and ATOM's rule at temperature 0
                without_timestamps=True,
                vad_filter=False,
            )
            return "".join(s.text for s in segments).strip()

        out.append(measured(transcribe, taken, c))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clips", type=int, default=16)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    taken = clips(args.clips)
    report: dict[str, Any] = {
        "machine": machine(),
        "clips": len(taken),
        "audio_s": round(sum(s for _, _, s in taken), 1),
        "atom": atom_levels(taken, args.concurrency),
    }
    with tempfile.TemporaryDirectory() as work:
        folder = ctranslate2_folder(Path(work))
        for compute in ("int8", "float32"):
            found = faster_whisper_levels(folder, compute, taken, args.concurrency)
            report[f"faster_whisper_{compute}"] = found
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
