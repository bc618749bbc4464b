"""The ``cbt`` command (docs/cli.md) of a pip-installed cbt.

The package carries the C program, built from cli/ in the same build as the
extension (cbt/_bin/cbt; in a wheel auditwheel has pointed it at the bundled
libraries). ``cbt`` on PATH (pyproject.toml's ``[project.scripts]``) and
``python -m cbt`` both run :func:`main`, which replaces this process with that
program: the same arguments, its output, its signals and its exit status.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional, Sequence


def path() -> str:
    """The C program's path inside the installed package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "cbt")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exec the C program with ``argv`` (default: this process's arguments).
    Returns only when it cannot be run: 127, with one line on stderr."""
    exe = path()
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, ["cbt", *args])
    except OSError as e:
        sys.stderr.write(f"cbt: cannot run the cbt command at {exe} ({e.strerror}): this cbt "
                         f"package was installed without it; reinstall it (docs/install.md)\n")
    return 127
