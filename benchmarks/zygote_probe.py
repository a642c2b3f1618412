"""Which of the zygote's preloads start OS threads or initialise the CUDA driver (run where
torch is): after each, the zygote's own verdict (a throwaway fork included) and the threads
left."""

import os
import sys
from pathlib import Path

from pytest_cudagraph_guard.isolation import forking, preloads, zygote


def thread_names() -> list[str]:
    tasks = Path("/proc/self/task")
    return sorted((tasks / t / "comm").read_text().strip() for t in os.listdir(tasks))


for name in (*preloads.PRELOAD_FIRST, *preloads.PRELOAD_FOR_COMPILING):
    zygote.preload(name)
    print(f"{name}: {forking.fork_hazard()}; threads {thread_names()}", file=sys.stderr)
