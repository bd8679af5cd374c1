"""From logits to tokens: the logits processors, the sampler and the structured-output
matchers."""
