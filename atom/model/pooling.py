"""The pooling runner: an encoder (or decoder) model that turns each input into one vector.

Embedding models pool their last hidden states as their sentence-transformers folder
says (`modules.json`, `1_Pooling/config.json`, a `Normalize` module), so the vectors
are those `SentenceTransformer.encode()` gives; cross-encoders and classifiers
(`*ForSequenceClassification`) give their logits. The Pooler actor calls `pool`, one
call at a time, on the device thread.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from atom.model.catalog import ModelKind, ModelSpec, num_labels, read_json, resolve_source
from atom.model.loader import device_and_dtype, local_folder
from atom.progress import quiet_library_bars
from atom.vocabulary.config import Settings
from atom.vocabulary.events import PoolingInput

log = structlog.get_logger(__name__)

# sentence-transformers' Pooling config keys, in the order it concatenates them.
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "lasttoken")


class PoolingRunner(Protocol):
    def pool(self, inputs: Sequence[PoolingInput]) -> list[array[float]]:
        """The model's output for each input, in order (float32 values)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingRuntime:
    """What loading a pooling model produces."""

    kind: ModelKind
    runner: PoolingRunner
    tokenizer: Any
    max_model_len: int
    num_dimensions: int  # of each output: the embedding size, or the number of labels
    labels: tuple[str, ...] = ()  # a classifier's, by logit index
    is_matryoshka: bool = False  # embeddings may be cut to fewer dimensions
    description: Mapping[str, str] = field(default_factory=dict)  # device, dtype, pooling


class TorchPoolingRunner:
    """Runs padded batches of inputs sorted by length (padding stays small)."""

    def __init__(
        self,
        model: Any,
        *,
        kind: ModelKind,
        modes: tuple[str, ...] = (),
        normalize: bool = False,
        pad_token_id: int = 0,
        max_padded_tokens: int = 8192,
    ) -> None:
        self.model = model
        self.kind = kind
        self.modes = modes
        self.normalize = normalize
        self.pad_token_id = pad_token_id
        self.max_padded_tokens = max_padded_tokens
        self.device = next(model.parameters()).device

    def pool(self, inputs: Sequence[PoolingInput]) -> list[array[float]]:
        import torch

        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].token_ids))
        outputs: list[array[float]] = [array("f")] * len(inputs)
        with torch.inference_mode():
            for group in _groups(order, inputs, self.max_padded_tokens):
                rows = self._forward([inputs[i] for i in group])
                for idx, row in zip(group, rows, strict=True):
                    outputs[idx] = array("f", row.tobytes())
        return outputs

    def _forward(self, batch: list[PoolingInput]) -> Any:
        import torch

        width = max(len(i.token_ids) for i in batch)
        ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        types = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, item in enumerate(batch):
            n = len(item.token_ids)
            ids[row, :n] = torch.tensor(item.token_ids)
            mask[row, :n] = 1
            if item.token_type_ids is not None:
                types[row, :n] = torch.tensor(item.token_type_ids)
        kwargs = {"input_ids": ids, "attention_mask": mask}
        if any(i.token_type_ids is not None for i in batch):
            kwargs["token_type_ids"] = types
        out = self.model(**{k: v.to(self.device) for k, v in kwargs.items()})
        if self.kind is not ModelKind.EMBED:
            return out.logits.float().cpu().numpy()
        pooled = pool_hidden(out.last_hidden_state.float(), mask.to(self.device), self.modes)
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.cpu().numpy()


def _groups(
    order: list[int], inputs: Sequence[PoolingInput], max_padded_tokens: int
) -> list[list[int]]:
    """Consecutive runs of `order` (shortest first) whose padded size fits the limit."""
    groups: list[list[int]] = [[]]
    for idx in order:
        width = len(inputs[idx].token_ids)  # the longest so far: inputs come shortest first
        if groups[-1] and (len(groups[-1]) + 1) * width > max_padded_tokens:
            groups.append([])
        groups[-1].append(idx)
    return groups


def pool_hidden(hidden: Any, mask: Any, modes: tuple[str, ...]) -> Any:
    """sentence-transformers' Pooling: each mode over the unpadded positions, concatenated."""
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    lengths = weights.sum(dim=1).clamp(min=1e-9)
    parts = []
    for mode in modes:
        if mode == "cls_token":
            parts.append(hidden[:, 0])
        elif mode == "max_tokens":
            parts.append(hidden.masked_fill(weights == 0, -1e9).max(dim=1).values)
        elif mode == "mean_tokens":
            parts.append((hidden * weights).sum(dim=1) / lengths)
        elif mode == "mean_sqrt_len_tokens":
            parts.append((hidden * weights).sum(dim=1) / lengths.sqrt())
        else:  # lasttoken: right padding, so the last unpadded position
            last = mask.sum(dim=1) - 1
            parts.append(hidden[torch.arange(hidden.shape[0]), last])
    return torch.cat(parts, dim=1)


def load_pooling(settings: Settings, spec: ModelSpec) -> PoolingRuntime:
    """Weights and tokenizer of an embedding, cross-encoder or classifier model. Cost:
    seconds; call it off the event loop."""
    from transformers import AutoTokenizer

    folder = local_folder(resolve_source(spec.source), settings.cache_dir)
    config = read_json(folder / "config.json")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_model_len = _max_model_len(folder, config, settings.max_model_len)
    is_embedding = spec.kind is ModelKind.EMBED
    modes, normalize = sentence_transformer_modules(folder) if is_embedding else ((), False)
    model = _load_weights(settings, folder, spec.kind)
    runner = TorchPoolingRunner(
        model,
        kind=spec.kind,
        modes=modes,
        normalize=normalize,
        pad_token_id=tokenizer.pad_token_id or 0,
        max_padded_tokens=max(settings.max_num_batched_tokens, max_model_len),
    )
    labels: tuple[str, ...] = ()
    if is_embedding:
        num_dimensions = int(config.get("hidden_size", 0)) * len(modes)
    else:
        num_dimensions = num_labels(config)
        labels = tuple(model.config.id2label[i] for i in range(num_dimensions))
    description = _description(folder, runner)
    log.info("pooling_model_loaded", model=spec.name, kind=spec.kind.value, **description)
    return PoolingRuntime(
        description=description,
        kind=spec.kind,
        runner=runner,
        tokenizer=tokenizer,
        max_model_len=max_model_len,
        num_dimensions=num_dimensions,
        labels=labels,
        is_matryoshka=bool(config.get("is_matryoshka") or config.get("matryoshka_dimensions")),
    )


def _description(folder: Path, runner: TorchPoolingRunner) -> dict[str, str]:
    """What loading chose, for the start-up log and /server_info."""
    return {
        "source": str(folder),
        "device": str(runner.device),
        "dtype": str(next(runner.model.parameters()).dtype).removeprefix("torch."),
        "pooling": ",".join(runner.modes) or "logits",
        "normalize": str(runner.normalize).lower(),
    }


def _load_weights(settings: Settings, folder: Path, kind: ModelKind) -> Any:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    device, dtype_name = device_and_dtype(settings)
    auto = AutoModel if kind is ModelKind.EMBED else AutoModelForSequenceClassification
    quiet_library_bars()
    model = auto.from_pretrained(folder, dtype=getattr(torch, dtype_name))
    return model.to(device).eval()


def sentence_transformer_modules(folder: Path) -> tuple[tuple[str, ...], bool]:
    """The pooling modes and whether vectors are normalized, from `modules.json`; a bare
    encoder without one pools its CLS token and normalizes, as vLLM does. ValueError for
    modules ATOM does not run (Dense layers and the like)."""
    listed = read_json(folder / "modules.json", expect=list)
    modules = [m for m in listed if isinstance(m, dict)]
    if not modules:
        return ("cls_token",), True
    modes: tuple[str, ...] = ()
    normalize = False
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Pooling":
            pooling = read_json(folder / str(module.get("path", "")) / "config.json")
            modes = tuple(m for m in POOLING_MODES if pooling.get(f"pooling_mode_{m}"))
        elif kind == "Normalize":
            normalize = True
        elif kind != "Transformer":
            raise ValueError(f"{folder}: the sentence-transformers module {kind} is not supported")
    return modes or ("mean_tokens",), normalize


def _max_model_len(folder: Path, config: dict[str, Any], requested: int | None) -> int:
    """The model's positions, or sentence-transformers' `max_seq_length` when it says less
    (all-MiniLM-L6-v2 was trained on 256 tokens of its 512), or `--max-model-len`."""
    limit = int(config.get("max_position_embeddings", 512))
    trained = read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    if isinstance(trained, int):
        limit = min(limit, trained)
    return min(limit, requested) if requested else limit
