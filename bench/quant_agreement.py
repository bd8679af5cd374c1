"""How often fbgemm's dynamic int8 quantization (one 7-bit activation range for a
whole batch, what `--quantization int8` used before commit 02d4877) picks the same
top token as float32 over a real text: `python -m bench.quant_agreement`."""

from __future__ import annotations

import copy

import torch

from atom.model.loader import load_model
from atom.vocabulary.config import Settings

TEXT = (
    "The history of Paris spans more than two thousand years. The city began as a "
    "settlement of the Parisii, a Celtic tribe, on an island in the Seine. Under Roman "
    "rule it grew into Lutetia, and in the Middle Ages it became one of the largest "
    "cities in Europe, a centre of learning, trade and the arts. "
) * 2


def main() -> None:
    loaded = load_model(
        None, cache_dir=Settings().cache_dir, device="cpu", dtype=torch.float32, max_model_len=None
    )
    ids = torch.tensor([loaded.tokenizer.encode(TEXT)])
    with torch.no_grad():
        reference = loaded.model(ids).logits[0].argmax(-1)
        quantized = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(loaded.model), {torch.nn.Linear}, dtype=torch.qint8
        )
        got = quantized(ids).logits[0].argmax(-1)
    agreement = (reference == got).float().mean().item()
    print(f"{ids.shape[1]} positions: top-1 agreement with float32 {agreement:.1%}")


if __name__ == "__main__":
    main()
