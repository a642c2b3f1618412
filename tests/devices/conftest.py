"""What the tests of ``--cudagraph-gpus`` share: a host of several GPUs on a machine without
one. NVML is a stand-in ``pynvml`` module on the inner sessions' ``PYTHONPATH``, which the
plugin's real code asks in its throwaway process (each time logging to $NVML_ASKED); CUDA is the
stand-in of the isolation tests (``fake_cuda``), each process that initialises it logging the
variables it sees."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_cudagraph_guard.devices import host

from ..isolation.conftest import fake_cuda, logged

__all__ = ["fake_cuda", "fake_gpus", "logged", "nvml_asked", "nvml_askers"]

FAKE_PYNVML = """
import os

_NAMES = [name for name in os.environ["FAKE_GPUS"].split(",") if name]


class NVMLError(Exception):
    pass


def nvmlInit():
    with open(os.environ["NVML_ASKED"], "a") as log:  # by whom: xdist's controller or a worker
        log.write(f"{os.getpid()} {os.environ.get('PYTEST_XDIST_WORKER', 'controller')}\\n")
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

# The inner sessions' conftest, loaded before the plugin configures, in xdist's workers and a
# subprocess's session too: the driver's folder of GPUs is the stand-in host's, not this
# machine's.
FAKE_DRIVER = """
import os
from pathlib import Path

from pytest_cudagraph_guard.devices import host

host.DRIVER_GPUS = Path(os.environ["FAKE_DRIVER_GPUS"])
"""

FakeGpus = Callable[..., pytest.Pytester]


@pytest.fixture
def fake_gpus(
    fake_cuda: Callable[..., pytest.Pytester], monkeypatch: pytest.MonkeyPatch
) -> FakeGpus:
    """``fake_gpus(*names, shown=(...), listed=None)``: the tester, its host with a GPU of each
    name (none: NVML answers, with no device) and a driver whose folder lists ``listed`` of them
    (all where not given), CUDA's stand-in logging the variables ``shown`` (always
    ``CUDA_VISIBLE_DEVICES`` and ``PYTEST_XDIST_WORKER``)."""

    def install(
        *names: str, shown: tuple[str, ...] = (), listed: int | None = None
    ) -> pytest.Pytester:
        tester = fake_cuda("CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER", *shown)
        site = tester.path / "nvml"
        site.mkdir(exist_ok=True)
        (site / "pynvml.py").write_text(FAKE_PYNVML)
        tester.makeconftest(FAKE_DRIVER)
        driver = tester.path / "driver-gpus"
        driver.mkdir()
        for slot in range(len(names) if listed is None else listed):
            (driver / f"0000:{slot + 1:02x}:00.0").mkdir()
        monkeypatch.setenv("FAKE_DRIVER_GPUS", str(driver))
        monkeypatch.setattr(host, "DRIVER_GPUS", driver)  # put back after in-process sessions
        monkeypatch.setenv("PYTHONPATH", f"{site}:{tester.path / 'site'}")
        monkeypatch.setenv("FAKE_GPUS", ",".join(names))
        monkeypatch.setenv("NVML_ASKED", str(tester.path / "nvml.log"))
        # An inner session's own process is no xdist worker, though this test may run in one.
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        # As on a host where nothing placed this session (the outer one may have: -n on GPUs).
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("PYTEST_CUDAGRAPH_GUARD_DEVICES", raising=False)
        (tester.path / "nvml.log").write_text("")
        return tester

    return install


def nvml_asked(tester: pytest.Pytester) -> int:
    """How many times the sessions asked NVML."""
    return len(logged(tester, "nvml.log"))


def nvml_askers(tester: pytest.Pytester) -> list[str]:
    """Who asked NVML, in turn: ``controller`` (or a session without xdist) or a worker's id."""
    return [asker for _, asker in logged(tester, "nvml.log")]
