"""Vision-language models: image prompts, the vision encoder, the text model's view."""
