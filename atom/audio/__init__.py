"""Audio in: decoding files to the samples a speech model hears (docs/multimodal.md, "Audio")."""
