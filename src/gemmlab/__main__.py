"""``python -m gemmlab``: the ``gemmlab`` command."""

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
