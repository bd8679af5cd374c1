"""The served LoRA adapters: their names, each one's base model, and the `--lora-modules`
of the command line (docs/lora.md).

Models owns one Loras. Loading reads the PEFT folder in a worker thread (the base
model's `read_lora`), then hands the adapter to the base model's Batcher, which gives
it to the runner between two steps; only then is the name routed. Unloading takes the
name out of routing first and gives it back if the Batcher refuses (requests still
use the adapter).
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from atom.actors.cores import EngineCore
from atom.model.catalog import check_name
from atom.vocabulary.choices import LoraModule
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import AtomError, InvalidRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraCard:
    """A served adapter, as /v1/models lists it."""

    name: str
    path: str
    base: str  # the served name of its base model
    rank: int
    num_bytes: int


class Loras:
    def __init__(self, settings: Settings) -> None:
        self.is_enabled = settings.enable_lora
        self.modules = settings.loras
        self.cards: dict[str, LoraCard] = {}  # routed adapters, by name

    def at_start(self, base: str, is_first_generation: bool) -> list[LoraModule]:
        """The `--lora-modules` that go on the base model `base` once it is loaded."""
        return [
            m
            for m in self.modules
            if m.base_model_name == base or (m.base_model_name is None and is_first_generation)
        ]

    async def load(self, core: EngineCore, name: str, path: str, *, replace: bool) -> LoraCard:
        """Serve the adapter at `path` as `name` on `core`'s model. InvalidRequest (400)
        when LoRA is off, the name is taken (unless `replace`), or the folder does not
        load or fit the model."""
        if not self.is_enabled:
            raise InvalidRequest("LoRA adapters need the server started with --enable-lora")
        try:
            check_name(name)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="lora_name") from None
        if core.read_lora is None:
            raise InvalidRequest(f"the model `{core.name}` cannot apply LoRA adapters")
        if name in self.cards and not replace:
            raise InvalidRequest(
                f"an adapter is already served as `{name}` (load_inplace replaces it)",
                param="lora_name",
            )
        try:
            with trio.CancelScope(shield=True):  # a load cannot be stopped half way
                adapter = await trio.to_thread.run_sync(core.read_lora, name, path)
        except Exception as exc:  # any corrupt file: a bad safetensors, a JSON bomb
            raise InvalidRequest(
                f"could not load the adapter at {path}: {type(exc).__name__}: {exc}"[:2000],
                param="lora_path",
            ) from None
        await core.batcher.add_lora(adapter)
        card = LoraCard(
            name=name, path=adapter.path, base=core.name, rank=adapter.rank,
            num_bytes=adapter.num_bytes,
        )  # fmt: skip
        self.cards[name] = card
        return card

    async def unload(self, core: EngineCore, name: str) -> LoraCard:
        """Stop serving the adapter `name` (which must be routed) of `core`'s model; the
        Batcher's Conflict (409) when requests still use it, and it stays served."""
        card = self.cards.pop(name)
        try:
            await core.batcher.remove_lora(name)
        except AtomError:
            self.cards[name] = card
            raise
        return card

    def drop_base(self, base: str) -> None:
        """Forget the adapters of a base model no longer served."""
        for name in [n for n, card in self.cards.items() if card.base == base]:
            del self.cards[name]
