"""clocktune: fine-tune small language models into real-time agents that listen, call tools speculatively and
answer within about a second of the end of speech. Importing this package loads no heavy dependency."""

__version__ = "0.1.0"
