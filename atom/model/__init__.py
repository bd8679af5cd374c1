"""Synchronous engine parts the Batcher calls: runner, sampling, weight loading."""
