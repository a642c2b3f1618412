"""What a fresh process costs a CUDA test: the floor under ``cudagraph_subprocess`` on CUDA.

Forks children of this process, which imports torch and never initialises CUDA (as the zygote):

    python benchmarks/cuda_process_cost.py            # needs CUDA

1. ``waves``: each child creates its CUDA context, runs a small matmul and a captured graph, and
   exits; N children at once, wall time per child. The least of them at 8 and 16 at once is the
   floor under a CUDA test in a fresh process (:func:`per_child_floor`, which ``bench.py --gpu``
   measures in its own run).
2. ``contexts``: N children create their contexts and stay up; then all are killed.
3. ``steps``: the bench's small CUDA test, step by step, twice in one fresh process whose context
   is already created: the first time pays for loading each kernel.
4. ``driver``: N children at once call the driver itself (``cuInit``, then the primary context),
   under each of a few environments; from when each child's calls began and ended, how long some
   child was inside each call, per child. Where that grows with the number of children although
   their calls overlap, the driver does that work one child at a time.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import NamedTuple

import torch

CONCURRENCY = (1, 4, 8, 16)
# Where the driver, creating contexts one at a time, sets the pace: the floor per child.
FLOOR_CONCURRENCY = (8, 16)
# Environments that might make a context cheaper to create: fewer hardware queues per context.
DRIVER_ENVIRONMENTS: dict[str, dict[str, str]] = {
    "default": {},
    "CUDA_DEVICE_MAX_CONNECTIONS=1": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
}


def _in_child(work: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``work``'s result, computed in a forked child."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # whatever happens, the child never returns into the parent's code
            os.close(reader)
            os.write(writer, json.dumps(work()).encode())
        finally:
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


class Wave(NamedTuple):
    concurrency: int
    children: int
    per_child: float  # seconds of the wave's wall time per child
    context: float  # a child's median seconds to create its context
    work: float  # then its median seconds for the matmul and the graph

    def __str__(self) -> str:
        return (
            f"waves {self.concurrency:2} at once, {self.children} children: "
            f"{self.per_child * 1e3:.0f} ms per child; median context {self.context * 1e3:.0f} "
            f"ms, then matmul and graph {self.work * 1e3:.0f} ms"
        )


def waves(concurrency: int, children: int) -> Wave:
    """``children`` children, ``concurrency`` at a time, each living :func:`_life`."""
    reader, writer = os.pipe()
    start = time.perf_counter()
    running: set[int] = set()
    for _ in range(children):
        if len(running) >= concurrency:
            running.discard(os.wait()[0])
        pid = os.fork()
        if pid == 0:
            try:  # whatever happens, the child never returns into the parent's code
                os.close(reader)
                os.write(writer, (json.dumps(_life()) + "\n").encode())
            finally:
                os._exit(0)
        running.add(pid)
    for pid in running:
        os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    os.close(writer)
    with os.fdopen(reader) as pipe:
        lives = [json.loads(line) for line in pipe]
    return Wave(
        concurrency,
        children,
        per_child=wall / children,
        context=statistics.median(life["context"] for life in lives),
        work=statistics.median(life["work"] for life in lives),
    )


def _waiting_child(
    news: int, work: Callable[[], object], environment: dict[str, str], siblings: list[int]
) -> tuple[int, int]:
    """A child that creates its context, says "ready PID" on ``news``, waits for a byte on its
    own pipe, runs ``work``, says "done PID" and exits (1 where anything failed, its traceback
    on stderr); its pid and that pipe's write end. ``siblings``: the other children's write
    ends, closed in the child."""
    go_reader, go_writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:  # whatever happens, the child never returns into the parent's code
            for fd in [go_writer, *siblings]:
                os.close(fd)
            os.environ.update(environment)
            _context()
            os.write(news, f"ready {os.getpid()}\n".encode())
            os.read(go_reader, 1)
            work()
            os.write(news, f"done {os.getpid()}\n".encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(go_reader)
    return pid, go_writer


class _Lanes:
    """The children of :func:`pipelined` and what each has said."""

    def __init__(self) -> None:
        self.go: dict[int, int] = {}  # pid -> the write end that starts its work, until reaped
        self.waiting: list[int] = []  # pids whose contexts are created, in order
        self.running: set[int] = set()
        self.unfinished: set[int] = set()  # forked, and neither done nor reaped
        self.failed: list[int] = []  # exit codes other than 0

    def read(self, news: bytes) -> None:
        words = news.split()
        for kind, pid in zip(words[::2], map(int, words[1::2]), strict=True):
            if kind == b"done":
                self.running.discard(pid)
                self.unfinished.discard(pid)
            elif pid in self.go:  # not one reaped already
                self.waiting.append(pid)

    def reap(self, pid: int, status: int) -> None:
        os.close(self.go.pop(pid))
        self.running.discard(pid)  # one that died before it said so
        self.unfinished.discard(pid)
        if pid in self.waiting:
            self.waiting.remove(pid)
        if os.waitstatus_to_exitcode(status) != 0:
            self.failed.append(os.waitstatus_to_exitcode(status))

    def reap_ended(self) -> None:
        for pid in list(self.go):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                self.reap(pid, status)

    def wait_all(self) -> None:
        for pid in list(self.go):
            self.reap(pid, os.waitpid(pid, 0)[1])

    def end(self) -> None:
        """Every child still up is killed (none is, after a run that went well) and reaped."""
        for pid in list(self.go):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.reap(pid, os.waitpid(pid, 0)[1])


def pipelined(
    lanes: int,
    children: int,
    work: Callable[[], object],
    environment: dict[str, str] | None = None,
    ahead: int = 1,
) -> float:
    """Seconds for ``children`` children to run ``work`` once each, ``lanes`` at a time, with
    ``ahead`` more per lane already up and with their contexts created, each waiting for its
    turn (as a test process set up ahead waits for its test). A lane is free once its child says
    its work is done, while that child still exits (as a test process's "done"). ``environment``
    is added to each child's own before it creates its context. This process must not have
    initialised CUDA. Raises ``RuntimeError`` where a child failed."""
    news_reader, news_writer = os.pipe()  # "ready PID" and "done PID" lines from the children
    children_of = _Lanes()
    started = 0
    start = time.perf_counter()
    try:
        while started < children or children_of.unfinished:
            while started < children and len(children_of.go) < lanes * (1 + ahead):
                siblings = list(children_of.go.values())
                pid, go_writer = _waiting_child(news_writer, work, environment or {}, siblings)
                children_of.go[pid] = go_writer
                children_of.unfinished.add(pid)
                started += 1
            if select.select([news_reader], [], [], 0.001)[0]:
                children_of.read(os.read(news_reader, 4096))
            while children_of.waiting and len(children_of.running) < lanes:
                pid = children_of.waiting.pop(0)
                os.write(children_of.go[pid], b"g")
                children_of.running.add(pid)
            children_of.reap_ended()
        wall = time.perf_counter() - start
        children_of.wait_all()  # the last children, done and exiting
    finally:
        children_of.end()
        os.close(news_reader)
        os.close(news_writer)
    if children_of.failed:
        raise RuntimeError(f"{len(children_of.failed)} of {children} children failed")
    return wall


def per_child_floor() -> float:
    """Seconds per fresh CUDA process at the driver's pace: the least per child of waves of 8
    and 16 at once. This process must not have initialised CUDA."""
    return min(waves(concurrency, 2 * concurrency).per_child for concurrency in FLOOR_CONCURRENCY)


def first_run_floor() -> float:
    """Seconds of the bench's test run the first time in a fresh process whose context is already
    created: what a serial suite of such tests pays per test at least, since no test may start
    before the one before it ends, and each loads its kernels. This process must not have
    initialised CUDA."""
    timings = _in_child(steps)
    return sum(ms for step, ms in timings.items() if step.startswith("first")) / 1e3


def cuda_available() -> bool:
    """Asked in a child: this process must never touch CUDA, or its children could not use it."""
    return bool(_in_child(lambda: {"available": float(torch.cuda.is_available())})["available"])


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


def _driver_calls() -> dict[str, float]:
    """``cuInit`` and the primary context of device 0, through the driver alone: when each began
    and ended (``time.perf_counter``, one clock for every process)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    began = time.perf_counter()
    status = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0)
    initialised = time.perf_counter()
    status = status or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    status = status or cuda.cuCtxSetCurrent(context) or cuda.cuCtxSynchronize()
    return {
        "began": began,
        "initialised": initialised,
        "ended": time.perf_counter(),
        "status": status,
    }


def _covered(intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """Seconds during which at least one, and at least two, of ``intervals`` were open."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    one = two = 0.0
    open_now, last = 0, edges[0][0]
    for time_at, step in edges:
        one += (time_at - last) if open_now >= 1 else 0.0
        two += (time_at - last) if open_now >= 2 else 0.0
        open_now, last = open_now + step, time_at
    return one, two


def _driver_child(writer: int, environment: dict[str, str]) -> None:
    """A child's whole life: its calls under ``environment`` alone (the variables the other
    environments set are unset), one line of JSON, then a pause until it is killed; whatever
    happens, it never returns into the parent's code."""
    try:
        for variables in DRIVER_ENVIRONMENTS.values():
            for name in variables:
                os.environ.pop(name, None)
        os.environ.update(environment)
        os.write(writer, (json.dumps(_driver_calls()) + "\n").encode())
        signal.pause()
    finally:
        os._exit(0)


def driver(children: int, environment: dict[str, str]) -> str:
    """``children`` children at once, each calling :func:`_driver_calls` under ``environment``."""
    reader, writer = os.pipe()
    pids = []
    try:
        for _ in range(children):
            pid = os.fork()
            if pid == 0:
                os.close(reader)
                _driver_child(writer, environment)
            pids.append(pid)
        os.close(writer)
        with os.fdopen(reader) as pipe:
            lines = [pipe.readline() for _ in range(children)]
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    calls = [json.loads(line) for line in lines if line]
    if len(calls) < children:
        return f"{children} children at once: {children - len(calls)} ended without an answer"
    parts = []
    for name, start, end in (
        ("cuInit", "began", "initialised"),
        ("context", "initialised", "ended"),
    ):
        one, two = _covered([(call[start], call[end]) for call in calls])
        each = statistics.median(call[end] - call[start] for call in calls)
        parts.append(
            f"{name}: median {each * 1e3:.0f} ms in each child, some child in it for "
            f"{one * 1e3:.0f} ms ({one / children * 1e3:.0f} ms a child), two or more at once for "
            f"{two / one:.0%} of that"
        )
    failed = sum(1 for call in calls if call["status"])
    return f"{children} children at once, {failed} failed; " + "; ".join(parts)


def main() -> int:
    if not cuda_available():
        print("CUDA is not available")
        return 0
    for concurrency in CONCURRENCY:
        print(waves(concurrency, max(8, 2 * concurrency)), flush=True)
    for children in CONCURRENCY[1:]:
        print(contexts(children), flush=True)
    for _ in range(2):
        print("steps (ms):", _in_child(steps), flush=True)
    for name, environment in DRIVER_ENVIRONMENTS.items():
        for children in CONCURRENCY[1:]:
            print(f"driver, {name}:", driver(children, environment), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
