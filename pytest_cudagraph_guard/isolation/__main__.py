"""``python -m pytest_cudagraph_guard.isolation serve`` runs a zygote (:mod:`.zygote`);
``python -m pytest_cudagraph_guard.isolation run REQUEST`` runs one test in this fresh
interpreter, the fallback where no zygote can fork (:mod:`.child`): its request file holds its
session's hello too."""

from __future__ import annotations

import sys
from typing import NoReturn


def main(argv: list[str]) -> NoReturn:
    if argv[:1] == ["serve"]:
        from .zygote import serve

        serve()
    if len(argv) == 2 and argv[0] == "run":
        from .child import run_child

        run_child(argv[1])
    print(f"usage: python -m {__package__} serve | run REQUEST", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
