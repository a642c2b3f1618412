"""What the tests of ``--cudagraph-gpus`` share: a host of several GPUs on a machine without
one. NVML is a stand-in ``pynvml`` module on the inner sessions' ``PYTHONPATH``, which the
plugin's real code asks in its throwaway process (each time logging to $NVML_ASKED); CUDA is the
stand-in of the isolation tests (``fake_cuda``), each process that initialises it logging the
variables it sees."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ..isolation.conftest import fake_cuda, logged

__all__ = ["fake_cuda", "fake_gpus", "logged"]

FAKE_PYNVML = """
import os

_NAMES = [name for name in os.environ["FAKE_GPUS"].split(",") if name]


class NVMLError(Exception):
    pass


def nvmlInit():
    with open(os.environ["NVML_ASKED"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    if os.environ.get("FAKE_NVML_FAILS"):  # a driver whose NVML fails: it cannot count
        raise NVMLError("Unknown Error")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_NAMES)


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return _NAMES[handle].encode()


def nvmlDeviceGetUUID(handle):
    return f"GPU-{handle:08d}-fake"
"""

FakeGpus = Callable[..., pytest.Pytester]


@pytest.fixture
def fake_gpus(
    fake_cuda: Callable[..., pytest.Pytester], monkeypatch: pytest.MonkeyPatch
) -> FakeGpus:
    """``fake_gpus(*names, shown=(...))``: the tester, its host with a GPU of each name (none:
    NVML answers, with no device), CUDA's stand-in logging the variables ``shown`` (always
    ``CUDA_VISIBLE_DEVICES`` and ``PYTEST_XDIST_WORKER``)."""

    def install(*names: str, shown: tuple[str, ...] = ()) -> pytest.Pytester:
        tester = fake_cuda("CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER", *shown)
        site = tester.path / "nvml"
        site.mkdir(exist_ok=True)
        (site / "pynvml.py").write_text(FAKE_PYNVML)
        monkeypatch.setenv("PYTHONPATH", f"{site}:{tester.path / 'site'}")
        monkeypatch.setenv("FAKE_GPUS", ",".join(names))
        monkeypatch.setenv("NVML_ASKED", str(tester.path / "nvml.log"))
        # As on a host where nothing placed this session (the outer one may have: -n on GPUs).
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("PYTEST_CUDAGRAPH_GUARD_DEVICES", raising=False)
        (tester.path / "nvml.log").write_text("")
        return tester

    return install


def nvml_asked(tester: pytest.Pytester) -> int:
    """How many times the sessions asked NVML."""
    return len(logged(tester, "nvml.log"))
