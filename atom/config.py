"""Settings: one frozen record; `atom serve --flag` and `ATOM_FLAG` map onto the same fields."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Server settings. `model=None` serves the embedded default model."""

    model: str | None = None
    served_model_name: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    quantization: str | None = None
    cpu_kernels: str = "auto"
    model_impl: str = "auto"
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    default_chat_template_kwargs: str | None = None  # a JSON object
    exclude_tools_when_tool_choice_none: bool = False
    max_queued_requests: int = 256
    max_queue_wait: float = 120.0  # seconds in the queue before a 503
    body_timeout: float = 30.0  # seconds for a request body to arrive before a 408
    max_n: int = 16
    request_log: str | None = None
    cache_dir: str = str(Path.home() / ".cache" / "atom")
    device: str | None = None
    dtype: str | None = None
    num_threads: int | None = None
    log_level: str = "info"

    @property
    def model_name(self) -> str:
        """The name clients use in `model`; defaults to a readable name of the model."""
        if self.served_model_name:
            return self.served_model_name
        if self.model is None:
            return DEFAULT_MODEL_NAME
        return Path(self.model.rstrip("/")).name.removesuffix(".gguf")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read `ATOM_<FIELD>` variables; unset ones keep their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"ATOM_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f, raw)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The `ATOM_*` variables that reproduce these settings (for hypercorn's import)."""
        return {
            f"ATOM_{f.name.upper()}": str(getattr(self, f.name))
            for f in fields(self)
            if getattr(self, f.name) is not None
        }


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    kind = str(f.type)
    if kind.startswith("int"):
        return int(raw)
    if kind.startswith("float"):
        return float(raw)
    if kind.startswith("bool"):
        if raw.lower() not in _BOOLS:
            raise ValueError(f"ATOM_{f.name.upper()}: expected true or false, got {raw!r}")
        return _BOOLS[raw.lower()]
    return raw


_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
