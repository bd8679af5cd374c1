"""Per-choice text work: incremental detokenization, stop strings, prompt rendering."""
