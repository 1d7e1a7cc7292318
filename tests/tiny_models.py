"""Dimensions of the tiny random models the tests build from real architectures' configs (as TRL's tiny models)."""

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
