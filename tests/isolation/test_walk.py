"""The walk that loads modules into a zygote (``isolation.walk``): real trial forks over a real
package, no pytest session. A module that starts a thread is left to the test processes, with
every module that imports it, even one that catches what stopped it; what completed before it
is loaded, in the order it completed; a module whose import fails is left too."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cudagraph_guard._torch.runtime import import_quietly
from pytest_cudagraph_guard.isolation.walk import walk_imports

pytestmark = pytest.mark.processes  # it forks or starts processes itself

PACKAGE = {
    "__init__.py": "",
    "starts.py": "import walked_pkg.pure\nimport walked_pkg.threaded\nVALUE = 1\n",
    "pure.py": "import colorsys\n",
    "threaded.py": (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    ),
    "imports_it.py": "import walked_pkg.threaded\n",
    "catches_it.py": "try:\n    import walked_pkg.threaded\nexcept BaseException:\n    pass\n",
    "after.py": "import walked_pkg.pure\n",
    "fails.py": "raise RuntimeError('no')\n",
}
ORDER = ["walked_pkg", *(f"walked_pkg.{name[:-3]}" for name in PACKAGE if name != "__init__.py")]


@pytest.fixture
def package(tmp_path: Path) -> Iterator[None]:
    (tmp_path / "walked_pkg").mkdir()
    for name, text in PACKAGE.items():
        (tmp_path / "walked_pkg" / name).write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.startswith("walked_pkg")]:
            del sys.modules[name]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.usefixtures("package")
def test_the_walk_loads_what_keeps_forks_sound_and_leaves_the_rest() -> None:
    threads = _threads()
    loaded: list[str] = []

    def load(name: str) -> None:
        loaded.append(name)
        import_quietly(name)

    walked = walk_imports(ORDER, load)
    assert _threads() <= threads  # no thread came with what was loaded
    assert "colorsys" in sys.modules
    assert [name for name in loaded if name.startswith("walked_pkg")] == [
        "walked_pkg",
        "walked_pkg.pure",
        "walked_pkg.after",
    ]
    assert set(walked.unsound) == {
        "walked_pkg.threaded",  # its own thread
        "walked_pkg.starts",  # importing it when the thread started
        "walked_pkg.imports_it",
        "walked_pkg.catches_it",  # caught the refusal: its state would not be the test's
    }
    assert "OS threads" in walked.unsound["walked_pkg.threaded"]
    assert list(walked.failed) == ["walked_pkg.fails"]
    assert "walked_pkg.threaded" not in sys.modules


CYCLE_AND_CATCH = {
    "cyc/__init__.py": "",
    "cyc/a.py": "import cyc.b\nimport cyc.c\n",
    "cyc/b.py": "import cyc.a\n",  # completes while cyc.a, which starts the thread, is importing
    "cyc/c.py": PACKAGE["threaded.py"],
    "pk/__init__.py": "try:\n    from pk import fast\nexcept BaseException:\n    pass\n",
    "pk/fast.py": PACKAGE["threaded.py"],
    "other.py": "import pk\n",  # imports a package that caught the refusal of what it imports
}


@pytest.fixture
def tricky(tmp_path: Path) -> Iterator[None]:
    for name, text in CYCLE_AND_CATCH.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.split(".")[0] in ("cyc", "pk", "other")]:
            del sys.modules[name]


VENDORING = {
    "vendoring/__init__.py": (
        "import os, sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), '_vendor'))\n"
        "import vendored\n"
    ),
    "vendoring/_vendor/vendored.py": "VALUE = 1\n",
}


@pytest.fixture
def vendoring(tmp_path: Path) -> Iterator[None]:
    for name, text in VENDORING.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = list(sys.path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield
    finally:
        sys.path[:] = path
        for name in ("vendoring", "vendored"):
            sys.modules.pop(name, None)


@pytest.mark.usefixtures("vendoring")
def test_a_module_the_trial_completed_before_what_made_it_importable_is_loaded_after_it() -> None:
    # The trial completes ``vendored`` before ``vendoring``, whose start put its folder on
    # sys.path (as setuptools does for its vendored packages): loaded in that order here, the
    # first import fails.
    walked = walk_imports(["vendoring", "vendored"], import_quietly)
    assert "vendored" in sys.modules
    assert "vendoring" in sys.modules
    assert walked.failed == {}
    assert walked.unsound == {}


@pytest.mark.usefixtures("tricky")
def test_what_reaches_an_unsound_module_through_a_cycle_or_a_caught_refusal_is_left() -> None:
    threads = _threads()
    order = ["cyc", "cyc.a", "cyc.b", "cyc.c", "pk", "pk.fast", "other"]
    walked = walk_imports(order, import_quietly)
    assert _threads() <= threads  # no thread came with what was loaded
    assert "cyc" in sys.modules
    for left in ("cyc.a", "cyc.b", "cyc.c", "pk", "pk.fast", "other"):
        assert left not in sys.modules, left
        assert left in walked.unsound, left


def test_the_device_count_is_asked_in_a_fork_that_leaves_nothing_here() -> None:
    """What NVML would leave behind (a thread of its own) stays in the fork that asks it: the
    answer is torch's, this process's threads are as they were, and torch's cache of the count
    holds the answer only within the walk."""
    import torch

    from pytest_cudagraph_guard._torch import process_work

    threads = set(os.listdir("/proc/self/task"))
    variable = os.environ.get(process_work.NVML_CHECK_VARIABLE)  # the user's, if set
    assert process_work._device_count_in_a_fork() == torch.cuda.device_count()
    assert set(os.listdir("/proc/self/task")) == threads
    with process_work.cuda_asked_through_nvml():
        assert os.environ[process_work.NVML_CHECK_VARIABLE] == (variable or "1")
    assert torch.cuda._cached_device_count is None  # type: ignore[attr-defined]
    assert os.environ.get(process_work.NVML_CHECK_VARIABLE) == variable
