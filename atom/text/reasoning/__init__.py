"""Reasoning parsers: split a choice's text into reasoning and content, streaming-exact."""
