"""``python -m pytest_cudagraph_guard report PATH``: see :mod:`.report.read_back`."""

from __future__ import annotations

import sys

from .report.read_back import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
