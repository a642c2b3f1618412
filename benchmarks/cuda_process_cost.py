"""What a fresh process costs a CUDA test: the floor under ``cudagraph_subprocess`` on CUDA.

Forks children of this process, which imports torch and never initialises CUDA (as the zygote):

    python benchmarks/cuda_process_cost.py            # needs CUDA

1. ``waves``: each child creates its CUDA context, runs a small matmul and a captured graph, and
   exits; N children at once, wall time per child.
2. ``contexts``: N children create their contexts and stay up; then all are killed.
3. ``steps``: the bench's small CUDA test, step by step, twice in one fresh process whose context
   is already created: the first time pays for loading each kernel.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable

import torch

CONCURRENCY = (1, 4, 8, 16)


def _in_child(work: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``work``'s result, computed in a forked child."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        os.write(writer, json.dumps(work()).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return dict(json.loads(data))


def _context() -> None:
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.cuda.synchronize()


def _small_graph(size: int = 64) -> None:
    x = torch.ones(size, size, device="cuda")
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x @ x + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x @ x + 1
    graph.replay()
    torch.cuda.synchronize()
    del y


def _life() -> dict[str, float]:
    start = time.perf_counter()
    _context()
    made = time.perf_counter()
    _small_graph()
    return {"context": made - start, "work": time.perf_counter() - made}


def waves(concurrency: int, children: int) -> str:
    """``children`` children, ``concurrency`` at a time, each living :func:`_life`."""
    reader, writer = os.pipe()
    start = time.perf_counter()
    running: set[int] = set()
    for _ in range(children):
        if len(running) >= concurrency:
            running.discard(os.wait()[0])
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            os.write(writer, (json.dumps(_life()) + "\n").encode())
            os._exit(0)
        running.add(pid)
    for pid in running:
        os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    os.close(writer)
    with os.fdopen(reader) as pipe:
        lives = [json.loads(line) for line in pipe]
    context = statistics.median(life["context"] for life in lives)
    work = statistics.median(life["work"] for life in lives)
    return (
        f"waves {concurrency:2} at once, {children} children: {wall / children * 1e3:.0f} ms per "
        f"child; median context {context * 1e3:.0f} ms, then matmul and graph {work * 1e3:.0f} ms"
    )


def contexts(children: int) -> str:
    """``children`` contexts created at once and kept; then every child killed."""
    reader, writer = os.pipe()
    start = time.perf_counter()
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            _context()
            os.write(writer, b".")
            signal.pause()
            os._exit(0)
        pids.append(pid)
    os.close(writer)
    for _ in range(children):
        os.read(reader, 1)
    created = time.perf_counter()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    ended = time.perf_counter()
    os.close(reader)
    return (
        f"contexts {children:2} at once: {(created - start) / children * 1e3:.0f} ms each to "
        f"create, {(ended - created) / children * 1e3:.0f} ms each to tear down"
    )


def steps() -> dict[str, float]:
    """The bench's test, twice, in a process whose context is created: milliseconds per step."""
    _context()
    timings: dict[str, float] = {}
    last = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal last
        torch.cuda.synchronize()
        now = time.perf_counter()
        timings[name] = round((now - last) * 1e3, 1)
        last = now

    for run in ("first", "second"):
        x = torch.randn(64, 64, device="cuda")
        static_in = torch.zeros(64, 64, device="cuda")
        mark(f"{run} tensors")
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            static_out = static_in @ static_in + 1
        torch.cuda.current_stream().wait_stream(side)
        mark(f"{run} matmul")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = static_in @ static_in + 1
        static_in.copy_(x)
        graph.replay()
        mark(f"{run} capture and replay")
        assert torch.allclose(static_out, x @ x + 1, atol=1e-2)
        mark(f"{run} allclose")
    return timings


def main() -> int:
    # Asked in a child: this process must never touch CUDA, or its children could not use it.
    if not _in_child(lambda: {"available": float(torch.cuda.is_available())})["available"]:
        print("CUDA is not available")
        return 0
    for concurrency in CONCURRENCY:
        print(waves(concurrency, max(8, 2 * concurrency)), flush=True)
    for children in CONCURRENCY[1:]:
        print(contexts(children), flush=True)
    for _ in range(2):
        print("steps (ms):", _in_child(steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
