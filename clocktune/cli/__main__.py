"""``python -m clocktune.cli``: the same as the ``clocktune`` command."""

import sys

from clocktune.cli.main import main

sys.exit(main())
