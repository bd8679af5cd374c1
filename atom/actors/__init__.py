"""Every task and channel: the engine, the Batcher, request actors, choice streams, the logger."""
