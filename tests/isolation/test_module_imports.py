"""What a test module's import loads, loaded once by the zygote before it forks the module's
first test process: installed modules in the order the parent's collection imported them, as
far as forks stay sound (never one that asks CUDA), and torch's per-process work. Counted in real
test processes, never timed."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_cudagraph_guard.isolation import preloads

from ..helpers import PytestCache
from .conftest import FORKED_BY_A_ZYGOTE, FakeCuda, logged

# An installed library in the shape of torch.testing._internal.inductor_utils: a pure module, a
# module whose import runs torch's CPU vector-ISA checks and then asks CUDA (the stand-in) about
# its device, and one imported after it.
LIBRARY = {
    "__init__.py": "",
    "core.py": "import xml.dom.minidom\nVALUE = 1\n",
    "testing.py": (
        "import heavy_lib.core\n"
        "import torch._inductor.cpu_vec_isa as isa\n"
        "HAS_CPU = bool(isa.valid_vec_isa_list()) or True\n"
        "import fake_cuda  # asks CUDA for its device properties\n"
        "import heavy_lib.later\n"
    ),
    "later.py": "import tarfile\n",
}
LIBRARY_MODULES = ("heavy_lib", "xml.dom.minidom", "tarfile")

CONFTEST = """
import sys

def pytest_configure(config):
    # what the test process has loaded before its collection imports the test module
    config.stash["at_start"] = set(sys.modules)
    isa = sys.modules.get("torch._inductor.cpu_vec_isa")
    config.stash["isa_done"] = bool(isa and isa.valid_vec_isa_list.cache_info().currsize)
"""

TEST_MODULE = f"""
import os
import sys
import pytest
import heavy_lib.testing
{FORKED_BY_A_ZYGOTE}
PREFIXES = {LIBRARY_MODULES!r}

@pytest.mark.cudagraph_subprocess
@pytest.mark.parametrize("i", range(3))
def test_imports(i, request):
    at_start = request.config.stash["at_start"]
    imported_here = sorted(
        name for name in sys.modules if name.startswith(PREFIXES) and name not in at_start
    )
    isa_done = request.config.stash["isa_done"]
    with open(os.environ["RAN"], "a") as log:
        log.write(f"{{os.getpid()}} {{os.getppid()}} {{forked_by_a_zygote()}} {{isa_done}} "
                  f"{{','.join(imported_here)}}\\n")
"""


@pytest.fixture
def library(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``heavy_lib``, installed outside the inner session's project folder."""
    site = tmp_path_factory.mktemp("installed")
    package = site / "heavy_lib"
    package.mkdir()
    for name, text in LIBRARY.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="plain", marks=pytest.mark.wide),
        pytest.param(["--doctest-modules"], id="doctest-modules"),
    ],
)
def test_a_test_module_s_installed_imports_are_loaded_once_before_its_first_test_process(
    fake_cuda: FakeCuda, library: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Each test process imports itself only the module that asks CUDA; the zygote never
    initialises CUDA; the vector-ISA checks the import ran are done before any test process.
    With ``--doctest-modules`` the module is collected twice, the second time finding its
    imports done."""
    tester = fake_cuda()
    # The inner session is a process of its own (its torch's caches start empty): its path, and
    # the one this session was given (where the plugin may come from).
    inherited = os.environ.get("PYTHONPATH")
    path = [str(library), str(tester.path / "site"), *([inherited] if inherited else [])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    tester.makeconftest(CONFTEST)
    tester.makepyfile(test_imports=TEST_MODULE)
    result = tester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=3)
    ran = logged(tester, "ran.log")
    assert len(ran) == 3
    zygotes = {int(line[1]) for line in ran}
    for pid, _, forked, isa_done, *imported in ran:
        assert forked == "True"
        assert imported == ["heavy_lib.testing"], pid  # the rest came loaded
        assert isa_done == "True", pid
    initialised = {int(line[0]) for line in logged(tester, "inits.log")}
    assert {int(line[0]) for line in ran} <= initialised  # each test process asked CUDA itself
    assert not zygotes & initialised  # the zygote never did


# An installed module whose import, in the parent's collection, waits for a zygote (or its trial
# fork) to have imported it: it says whether one had within the wait.
AHEAD_LIBRARY = {
    "__init__.py": "",
    "slow.py": (
        "import os, sys, time\n"
        "with open('/proc/self/cmdline', 'rb') as own:\n"
        "    in_a_zygote = b'serve' in own.read().split(b'\\0')\n"
        "mark = os.environ['AHEAD_MARK']\n"
        "if in_a_zygote:\n"
        "    open(mark, 'a').close()\n"
        "elif os.environ.get('AHEAD_WAIT_S'):\n"
        "    deadline = time.monotonic() + float(os.environ['AHEAD_WAIT_S'])\n"
        "    while not os.path.exists(mark) and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    with open(os.environ['AHEAD_SAID'], 'w') as said:\n"
        "        said.write('loaded by the zygote' if os.path.exists(mark) else 'not')\n"
    ),
}
AHEAD_TEST = """
import pytest
import ahead_lib.slow

@pytest.mark.cudagraph_subprocess
def test_one():
    pass
"""


@pytest.mark.wide
def test_a_zygote_loads_a_module_s_imports_as_the_last_session_saw_them_while_it_is_collected(
    ourtester: pytest.Pytester,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first session keeps what the module's import loaded in pytest's cache; the next one's
    zygote, started as the module's collection starts, loads it while the parent still imports
    the module (which waits for it), not only once the collection is done."""
    site = tmp_path_factory.mktemp("installed")
    (site / "ahead_lib").mkdir()
    for name, text in AHEAD_LIBRARY.items():
        (site / "ahead_lib" / name).write_text(text)
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(site), *([inherited] if inherited else [])])
    )
    mark, said = ourtester.path / "zygote-imported", ourtester.path / "said.txt"
    monkeypatch.setenv("AHEAD_MARK", str(mark))
    monkeypatch.setenv("AHEAD_SAID", str(said))
    ourtester.makepyfile(test_ahead=AHEAD_TEST)
    ourtester.runpytest_subprocess().assert_outcomes(passed=1)  # keeps the module's imports
    mark.unlink()
    monkeypatch.setenv("AHEAD_WAIT_S", "30")
    ourtester.runpytest_subprocess().assert_outcomes(passed=1)
    assert said.read_text() == "loaded by the zygote"
    mark.unlink()
    monkeypatch.setenv("AHEAD_WAIT_S", "1")  # it cannot come: the zygote walks after the import
    ourtester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert said.read_text() == "not"  # no cache, nothing known ahead: loaded after collection


def _collected(module: SimpleNamespace, *imported: str) -> None:
    """``module``'s collection, in which its import loads ``imported``."""
    preloads.module_collection_started(module)  # type: ignore[arg-type]
    for name in imported:
        importlib.import_module(name)
    preloads.module_collection_finished(module)  # type: ignore[arg-type]


@pytest.fixture
def new_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of two installed modules no test has loaded (a folder outside the project)."""
    site = tmp_path / "site"
    site.mkdir()
    names = [f"cgg_fresh_{tmp_path.name.replace('-', '_')}_{n}" for n in range(2)]
    for name in names:
        (site / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(site))
    yield names
    for name in names:
        sys.modules.pop(name, None)


def test_a_module_collected_twice_keeps_its_imports_of_both_in_order_and_in_the_cache(
    tmp_path: Path, new_modules: list[str]
) -> None:
    """As ``--doctest-modules`` collects a test module again, the second collector's imports
    add to the first's; a later session finds them in pytest's cache."""
    config = SimpleNamespace(
        stash=pytest.Stash(), rootpath=tmp_path / "project", cache=PytestCache()
    )
    path = tmp_path / "project" / "test_mod.py"
    module = SimpleNamespace(config=config, path=path)
    first, second = new_modules
    _collected(module, first)
    _collected(module, second)
    item = SimpleNamespace(config=config, path=path)
    found = preloads.module_imports(item)  # type: ignore[arg-type]
    assert found is not None
    assert [name for name in found["names"] if name in new_modules] == [first, second]
    assert found["module"] == str(path)
    later = SimpleNamespace(config=SimpleNamespace(cache=config.cache), path=path)
    assert preloads.imports_last_seen(later) == found  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kept",
    [{"names": "not a list", "work": []}, {"names": [1], "work": []}, {"names": []}, "?"],
)
def test_imports_kept_in_another_shape_are_not_read(tmp_path: Path, kept: object) -> None:
    path = tmp_path / "test_mod.py"
    cache = PytestCache({preloads._last_seen_key(str(path)): kept})
    module = SimpleNamespace(config=SimpleNamespace(cache=cache), path=path)
    assert preloads.imports_last_seen(module) is None  # type: ignore[arg-type]
