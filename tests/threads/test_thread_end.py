"""A thread given CUDAGraph Trees state (``ensure_cudagraph_tls``) leaves nothing in torch's C++
thread-local objects for the OS thread's end to free: before torch 2.13 that end frees them
without the GIL, and the process crashes later in any thread (torch 2.9.1: a segfault within
300 such threads). Real threads, real torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import torch

from pytest_cudagraph_guard import ensure_cudagraph_tls
from pytest_cudagraph_guard._torch.trees import TLS_KEYS


def test_what_a_thread_stashed_is_gone_before_its_os_thread_ends() -> None:
    """Python clears a thread's ``threading.local`` values in the order the thread first set
    them: a local set after ``ensure_cudagraph_tls`` is cleared after the plugin's, and sees
    what the OS thread's end will find."""
    found: list[object] = []

    class LookAtTheEnd:
        def __del__(self) -> None:
            found.extend(torch._C._get_obj_in_tls(key) for key in TLS_KEYS)

    last = threading.local()

    def drafter() -> None:
        ensure_cudagraph_tls()
        assert all(torch._C._get_obj_in_tls(key) is not None for key in TLS_KEYS)
        last.look = LookAtTheEnd()

    thread = threading.Thread(target=drafter)
    thread.start()
    thread.join()
    assert found == [None, None]


def test_many_threads_with_the_state_end_without_a_crash() -> None:
    code = textwrap.dedent(
        """
        import gc, threading
        import torch
        from pytest_cudagraph_guard import ensure_cudagraph_tls

        def drafter():
            ensure_cudagraph_tls()
            torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))

        for i in range(300):
            thread = threading.Thread(target=drafter)
            thread.start()
            thread.join()
            garbage = [{"a": [object() for _ in range(20)]} for _ in range(300)]
            if i % 25 == 0:
                gc.collect()
        print("ended")
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "ended"), ran.stderr[-2000:]
