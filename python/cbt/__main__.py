"""python -m cbt — the ``cbt`` command (docs/cli.md), as the ``cbt`` entry point runs it."""
import sys

from ._cli import main

sys.exit(main())
