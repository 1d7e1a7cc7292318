"""Importers: turn public benchmarks into clocktune timelines (``bfcl``: BFCL v4 multi-turn)."""
