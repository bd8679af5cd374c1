"""LoRA adapters: PEFT folders read into ATOM's fused projections (`adapter`), and their
deltas added row by row in a step that mixes adapters (`mixing`). docs/lora.md."""
