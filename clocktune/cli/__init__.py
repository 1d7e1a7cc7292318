"""The programs on top of the library: the ``clocktune`` command line (``main``) and the demo (``demo``).

Nothing in the library imports this package. ``clocktune.cli.demo`` is not imported here: it needs the generator
(``data_gen``) and transformers, which ``clocktune --help`` should not pay for.
"""

from clocktune.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
