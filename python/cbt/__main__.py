"""python -m cbt — the ``cbt`` command (docs/cli.md), as the ``cbt`` entry point runs it."""
import sys

from ._cli import main

if __name__ == "__main__":  # an import (mypy.stubtest walks every module) runs nothing
    sys.exit(main())
