"""Image input, against transformers: `python -m bench.vision [--out FILE]`.

A small random LLaVA (CLIP-shaped tower on 224-pixel images in patches of 16: 196 image
tokens; a 4-layer Llama with the default model's tokenizer; `tests/vision_models.py`)
is written once to `--folder`. One ATOM server serves it; the same folder is loaded in
this process into transformers. Each side gets the same 512x512 picture(s) and
question, one token of answer:

- time to first token at c=1 (ATOM: a streamed chat with the image as a PNG data URL,
  from sending to the first token; transformers: the same data URL decoded to a PIL
  image, the processor and `generate` with `max_new_tokens=1`), the best of
  `--repeats`, each with a new picture;
- images/s at c=8: eight requests at once, each its own picture (ATOM encodes the
  images of a step in one vision call), against one transformers `generate` over a
  batch of eight;
- ATOM's vision step alone, in process: 1 and 8 images encoded in one call.

Prints one JSON document; the machine is named in it.
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
import time
from pathlib import Path
from typing import Any

import trio

from bench.load import Target, fresh_connections, stream_chat
from bench.run import free_port, machine, publish, server
from tests.vision_models import data_url, picture, tiny_llava

QUESTION = "What is in the picture?"
SIZE = (512, 512)


def model_folder(folder: Path) -> Path:
    if not (folder / "config.json").exists():
        tiny_llava(
            folder, image_size=224, patch=16, vision_hidden=192, vision_layers=4,
            hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        )  # fmt: skip
    return folder


def chat(seed: int) -> list[dict[str, Any]]:
    image = {"type": "image_url", "image_url": {"url": data_url(picture(seed, SIZE))}}
    return [{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}]


async def atom_side(url: str, repeats: int) -> dict[str, Any]:
    target = Target(name="atom", url=url, model="llava", extra={})
    async with fresh_connections(600) as client:
        await stream_chat(client, target, chat(0), 1)  # warm-up
        ttfts: list[float] = []
        for i in range(repeats):
            sample = await stream_chat(client, target, chat(100 + i), 1)
            assert sample.ttft is not None, "no token came back"
            ttfts.append(sample.ttft)
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(stream_chat, client, target, chat(200 + i), 1)
        wall = time.perf_counter() - started
    return {"ttft_s_c1": round(min(ttfts), 4), "images_per_s_c8": round(8 / wall, 2)}


def transformers_side(folder: Path, repeats: int) -> dict[str, Any]:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()

    def answer(seeds: list[int]) -> float:
        urls = [data_url(picture(s, SIZE)) for s in seeds]  # made before the clock, as ATOM's
        started = time.perf_counter()
        images = [
            Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))).convert("RGB")
            for url in urls
        ]
        parts = [{"type": "image"}, {"type": "text", "text": QUESTION}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
        )
        texts = [text] * len(seeds)
        inputs = processor(text=texts, images=images, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            model.generate(**inputs, max_new_tokens=1, do_sample=False, pad_token_id=0)
        return time.perf_counter() - started

    answer([0])  # warm-up
    ttft = min(answer([100 + i]) for i in range(repeats))
    wall = answer([200 + i for i in range(8)])
    return {"ttft_s_c1": round(ttft, 4), "images_per_s_c8": round(8 / wall, 2)}


def encoder_side(folder: Path) -> dict[str, float]:
    """ATOM's vision step alone, in process: ms to encode 1 and 8 images in one call."""
    import torch

    from atom.http.media import MediaPolicy, load_image
    from atom.model.vision.loading import read_model, vision_forward
    from atom.text.prompt import IMAGE_PART, TemplateControls, render_chat

    vlm, processor = read_model(folder, torch.float32)
    _, parts = vision_forward(vlm.eval(), processor, "auto", kernels=None)
    messages = [{"role": "user", "content": [IMAGE_PART, {"type": "text", "text": QUESTION}]}]
    controls = TemplateControls(chat_template=parts.prompter.chat_template)
    ids = render_chat(parts.prompter.tokenizer, messages, controls=controls)
    images = [
        parts.prompter.expand(ids, [load_image(data_url(picture(s, SIZE)), "", MediaPolicy())])[1][
            0
        ]
        for s in range(8)
    ]
    encoder = parts.encoder
    timings: dict[str, float] = {}
    with torch.inference_mode():
        for count in (1, 8):
            encoder.encode(images[:count])  # warm-up
            started = time.perf_counter()
            for _ in range(5):
                encoder.encode(images[:count])
            timings[f"encode_{count}_ms"] = round(1000 * (time.perf_counter() - started) / 5, 2)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.vision")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/atom-bench-llava"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    folder = model_folder(args.folder)
    port = free_port()
    env = {"ATOM_MODEL": str(folder), "ATOM_SERVED_MODEL_NAME": "llava",
           "ATOM_LOG_LEVEL": "warning"}  # fmt: skip
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0",
               "-b", f"127.0.0.1:{port}", "atom.http:app"]  # fmt: skip
    with server(command, f"http://127.0.0.1:{port}/health", env):
        atom = trio.run(atom_side, f"http://127.0.0.1:{port}", args.repeats)
    reference = transformers_side(folder, args.repeats)
    atom["vision_step"] = encoder_side(folder)
    result = {
        "machine": machine(),
        "model": "random LLaVA: CLIP-shaped 4 layers x 192 on 224 px / 16 (196 image tokens), "
        "Llama 4 layers x 256",
        "image": f"{SIZE[0]}x{SIZE[1]} PNG",
        "atom": atom,
        "transformers": reference,
        "ttft_ratio": round(atom["ttft_s_c1"] / reference["ttft_s_c1"], 3),
        "images_per_s_ratio": round(atom["images_per_s_c8"] / reference["images_per_s_c8"], 3),
    }
    publish(result, args.out, indent=2)


if __name__ == "__main__":
    main()
