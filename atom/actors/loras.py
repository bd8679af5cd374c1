"""The served LoRA adapters: their names, each one's base model, and the `--lora-modules`
of the command line (docs/lora.md).

Models owns one Loras; the routed names are the Registry's. Loading reads the PEFT
folder in a worker thread (the base model's `read_lora`), then hands the adapter to the
base model's Batcher, which gives it to the runner between two steps; only then is the
name routed. Unloading takes the name out of routing first and gives it back if the
Batcher refuses (requests still use the adapter).
"""

from __future__ import annotations

import structlog
import trio

from atom.actors.cores import EngineCore
from atom.actors.registry import LoraCard, Registry
from atom.model.catalog import ModelKind, ModelSpec, check_name
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import AtomError, Conflict, InvalidRequest, ModelNotFound

log = structlog.get_logger(__name__)
GENERATION = frozenset({ModelKind.GENERATE})


class Loras:
    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.is_enabled = settings.enable_lora
        self.modules = settings.loras
        self._registry = registry

    async def start(self, spec: ModelSpec) -> None:
        """Serve the `--lora-modules` that go on the start-up model `spec` (those naming
        it, and those naming none when it is the first generation model). AtomError
        when one fails (fatal at start-up)."""
        specs = self._registry.specs.values()
        generation = [s.name for s in specs if s.kind is ModelKind.GENERATE]
        is_first = generation[:1] == [spec.name]
        for module in self.modules:
            if module.base_model_name == spec.name or (module.base_model_name is None and is_first):
                await self.load(module.name, module.path, spec.name)

    async def load(
        self, name: str, path: str, base: str | None, *, replace: bool = False
    ) -> LoraCard:
        """Serve the PEFT adapter at `path` as `name` on the generation model `base` (the
        first one when None). InvalidRequest (400) when LoRA is off, the name is taken
        (unless `replace`), or the folder does not load or fit the model; Conflict (409)
        for a model's name."""
        if name in self._registry.specs:
            raise Conflict(f"a model is already served as `{name}`", param="lora_name")
        card = self._registry.loras.get(name)
        if card is not None and replace:
            base = card.base
        core = self._registry.core(base, GENERATION, "/v1/load_lora_adapter")
        assert isinstance(core, EngineCore)
        card = await self._read(core, name, path, replace=replace)
        log.info(
            "lora_loaded", lora=name, model=card.base, path=card.path, rank=card.rank,
            num_bytes=card.num_bytes,  # its host copy; device slots come on top
        )  # fmt: skip
        return card

    async def _read(self, core: EngineCore, name: str, path: str, *, replace: bool) -> LoraCard:
        if not self.is_enabled:
            raise InvalidRequest("LoRA adapters need the server started with --enable-lora")
        try:
            check_name(name)
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="lora_name") from None
        if core.read_lora is None:
            raise InvalidRequest(f"the model `{core.name}` cannot apply LoRA adapters")
        if name in self._registry.loras and not replace:
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
        self._registry.put_lora(name, card)
        return card

    async def unload(self, name: str) -> LoraCard:
        """Stop serving the adapter `name`: ModelNotFound (404) when none is served so,
        the Batcher's Conflict (409) while requests use it (it stays served)."""
        card = self._registry.loras.get(name)
        core = self._registry.cores.get(card.base) if card is not None else None
        if card is None or not isinstance(core, EngineCore):
            raise ModelNotFound(f"no adapter is served as `{name}`", param="lora_name")
        self._registry.put_lora(name, None)
        try:
            await core.batcher.remove_lora(name)
        except AtomError:
            self._registry.put_lora(name, card)
            raise
        log.info("lora_unloaded", lora=name, model=card.base)
        return card

    def drop_base(self, base: str) -> None:
        """Forget the adapters of a base model no longer served."""
        for name in [n for n, card in self._registry.loras.items() if card.base == base]:
            self._registry.put_lora(name, None)
