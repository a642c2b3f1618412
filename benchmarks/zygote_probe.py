"""Which of the zygote's preloads start OS threads or load the CUDA driver (run where torch is)."""

import os
import sys
from pathlib import Path

from pytest_cudagraph_guard import zygote

for name in (*zygote.PRELOAD_FIRST, *zygote.PRELOAD_WHILE_IDLE):
    zygote.preload(name)
    names = sorted(
        Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")
    )
    print(f"{name}: {zygote.fork_hazard()}; threads {names}", file=sys.stderr)

print(
    f"after the zygote's hazard check: {zygote.fork_hazard()}; threads {zygote._os_thread_count()}",
    file=sys.stderr,
)
