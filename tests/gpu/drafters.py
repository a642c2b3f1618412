"""Thread bodies shaped like the drafter models of a speculative-decoding trainer."""

DRAFTER_SUITE = '''
import threading
import pytest
import torch


def own_function():
    """A function of this thread's own (its own code object, so its own compile)."""
    index = int(threading.current_thread().name.rsplit("-", 1)[-1])
    namespace = {{"torch": torch}}
    exec(f"def step(x):\\n    return torch.sin(x) * {{index + 2}} + torch.cos(x)\\n", namespace)
    return namespace["step"], index + 2


# A device-wide synchronize in one thread while another captures fails both, on every torch
# (graph_capture_lock serializes captures only): no thread synchronizes before all are done.
CALLS_DONE = threading.Barrier({threads})


def drafter_step():
    try:
        step, scale = own_function()
        compiled = torch.compile(step, mode="reduce-overhead")
        x = torch.randn(4096, device="cuda")
        for _ in range(3):  # warm-up, record, replay
            out = compiled(x)
    finally:
        CALLS_DONE.wait(timeout=240)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.sin(x) * scale + torch.cos(x))


@pytest.mark.cudagraph_thread(threads={threads}, tls="{tls}", trees={trees}, timeout=240)
def test_drafters():
    drafter_step()
'''


def drafter_suite(threads: int, tls: str, trees: bool = True) -> str:
    return DRAFTER_SUITE.format(threads=threads, tls=tls, trees=trees)
