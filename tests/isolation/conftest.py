"""What the tests of test processes share: the stand-in for CUDA that their sessions initialise on
a machine without a GPU, the logs its processes and their tests write, and how an inner test
tells that a zygote forked its process."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_cudagraph_guard.isolation.cuda import STANDIN_VARIABLE

# The stand-in for CUDA (``PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN``): importing it is initialising
# CUDA, through the same code path as ``torch.cuda.init``. Each process that imports it logs its
# pid to $INITS, with the variables named in $INITS_SHOWN as it sees them; each step of its
# kernels' warm-up (``WARM_UP_STEPS``) logs its process and name to $STEPS as it starts, then
# takes its time.
STANDIN = """
import os
import time

with open(os.environ["INITS"], "a") as log:
    shown = [str(os.environ.get(name)) for name in os.environ["INITS_SHOWN"].split()]
    log.write(" ".join([str(os.getpid()), *shown]) + "\\n")

def _step(name, seconds=0.0, fails=False):
    def run():
        with open(os.environ["STEPS"], "a") as log:
            log.write(f"{{os.getpid()}} {{name}}\\n")
        time.sleep(seconds)
        if fails:
            raise RuntimeError("no such kernel")
    return (name, run)

WARM_UP_STEPS = [{steps}]
"""
# The logs, in the tester's folder, named by the variables that give their paths: $RAN is the
# inner tests' own, where they note their processes.
LOGS = {"INITS": "inits.log", "STEPS": "steps.log", "RAN": "ran.log"}

FakeCuda = Callable[..., pytest.Pytester]


@pytest.fixture
def fake_cuda(ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """``fake_cuda(*shown, steps="")``: ``ourtester``, whose sessions have the stand-in for CUDA,
    its processes logging the variables ``shown``, its warm-up running ``steps`` (``_step(...)``
    calls)."""

    def install(*shown: str, steps: str = "") -> pytest.Pytester:
        site = ourtester.path / "site"
        site.mkdir(exist_ok=True)
        (site / "fake_cuda.py").write_text(STANDIN.format(steps=steps))
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv(STANDIN_VARIABLE, "fake_cuda")
        monkeypatch.setenv("INITS_SHOWN", " ".join(shown))
        for variable, name in LOGS.items():
            monkeypatch.setenv(variable, str(ourtester.path / name))
        return ourtester

    return install


def logged(tester: pytest.Pytester, name: str) -> list[list[str]]:
    """The lines of the log ``name`` in ``tester``'s folder, each split into its words."""
    return [line.split() for line in (tester.path / name).read_text().splitlines()]


# For an inner test module that imports os: whether the test's process was forked by a zygote
# (its parent runs ``python -m pytest_cudagraph_guard.isolation serve``); false where the test
# ran in the session's own process, or in one the session spawned.
FORKED_BY_A_ZYGOTE = """
def forked_by_a_zygote():
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        command = cmdline.read().split(b"\\0")
    return command[-3:-1] == [b"pytest_cudagraph_guard.isolation", b"serve"]
"""
