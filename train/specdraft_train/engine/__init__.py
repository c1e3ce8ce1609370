"""The target's greedy continuations (static engine, its cache, kernel and step graph; HF generate) and eval sets."""
