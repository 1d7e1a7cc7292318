"""Seeded generator of timestamped streaming dialogues with asynchronous tools and speculative calls."""
