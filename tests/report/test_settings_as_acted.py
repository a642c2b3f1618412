"""A record's settings are those torch acted under (compiled, recorded, replayed), its activity
does not depend on which test ran first, and threads torch started are named for what they are."""

from __future__ import annotations

import _thread
import threading

import pytest
import torch

from pytest_cudagraph_guard._torch import thread_names

from ..helpers import records_by_name

UNITTEST_SUITE = """
import unittest
import torch
import torch._inductor.config as config

def step(x):
    return torch.sin(x) * 2 + torch.cos(x)

class TestGraphs(unittest.TestCase):
    def setUp(self):
        self.patch = config.patch(
            {"triton.cudagraphs": True, "triton.cudagraph_unexpected_rerecord_limit": 7}
        )
        self.patch.__enter__()

    def tearDown(self):
        self.patch.__exit__(None, None, None)

    def test_reduce_overhead(self):
        torch._dynamo.reset()
        torch.compile(step, mode="reduce-overhead")(torch.ones(8))

    def test_plain_compile(self):
        torch._dynamo.reset()
        torch.compile(step)(torch.ones(8))
"""


def test_settings_that_teardown_restored_are_those_torch_compiled_with(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_unit=UNITTEST_SUITE)
    result = ourtester.runpytest("--cudagraph-report=term-all", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2)
    found = records_by_name(ourtester.path / "r.json")
    limit = "triton.cudagraph_unexpected_rerecord_limit"
    overhead = found["TestGraphs::test_reduce_overhead"]
    assert overhead["settings"]["triton.cudagraphs"] == {"value": True, "source": "compile"}
    assert overhead["settings"][limit] == {"value": 7, "source": "test"}
    assert overhead["settings_at_end"][limit]["value"] != 7  # the default tearDown put back
    assert "triton.cudagraphs" not in overhead["settings_at_end"]
    plain = found["TestGraphs::test_plain_compile"]
    assert plain["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    assert plain["settings_at_end"]["triton.cudagraphs"]["value"] is False
    assert overhead["settings_varied"] == plain["settings_varied"] == {}
    words = " ".join(line.strip() for line in result.stdout.lines)  # settings wrap over lines
    assert f"{limit}=7 (test); triton.cudagraphs=True (compile)" in words
    result.stdout.no_fnmatch_line("*at the end*")


ORDER_SUITE = """
import pytest
import torch

def step(x):
    return torch.sin(x) * 2

compiled = torch.compile(step, backend="inductor")

def test_first():
    torch._dynamo.reset()
    compiled(torch.ones(8))

def test_again():
    compiled(torch.ones(8))
    compiled(torch.ones(8))

@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    compiled(torch.ones(8))
"""


def test_code_an_earlier_test_compiled_is_in_the_activity(ourtester: pytest.Pytester) -> None:
    """The second and third tests compile nothing (dynamo's cache serves them): their records
    say they ran graphs an earlier test compiled, once per graph and test."""
    ourtester.makepyfile(test_order=ORDER_SUITE)
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=3)
    found = records_by_name(ourtester.path / "r.json")
    first = found["test_first"]["activity"]
    assert (len(first["compiled"]), first["earlier_compiled"]) == (1, 0)
    again = found["test_again"]["activity"]
    assert (len(again["compiled"]), again["earlier_compiled"]) == (0, 1)
    threads = found["test_in_threads"]["activity"]
    assert (len(threads["compiled"]), threads["earlier_compiled"]) == (0, 1)  # one graph


def test_a_thread_python_did_not_start_is_named_for_what_it_is() -> None:
    """``_thread.start_new_thread`` makes a thread that Python's threading did not start, as
    torch's C++ threads are (``threading._DummyThread``); during a backward it is autograd's."""
    seen: dict[str, str] = {}
    done = threading.Event()

    def native() -> None:
        try:
            seen["outside"] = thread_names.thread_label()
            x = torch.ones(2, requires_grad=True)
            x.register_hook(lambda grad: seen.update(backward=thread_names.thread_label()))
            (x * 2).sum().backward()
            seen["dummy"] = type(threading.current_thread()).__name__
        finally:
            done.set()

    _thread.start_new_thread(native, ())
    assert done.wait(60)
    assert seen == {
        "outside": thread_names.NATIVE_THREAD,
        "backward": thread_names.AUTOGRAD_THREAD,
        "dummy": "_DummyThread",
    }
    assert thread_names.thread_label() == threading.current_thread().name


NATIVE_SUITE = """
import _thread
import threading
import torch

def test_compiles_in_a_native_thread():
    done = threading.Event()
    def native():
        try:
            torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))
        finally:
            done.set()
    _thread.start_new_thread(native, ())
    assert done.wait(120)
"""


def test_records_name_a_native_thread(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_native=NATIVE_SUITE)
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1)
    record = records_by_name(ourtester.path / "r.json")["test_compiles_in_a_native_thread"]
    activity = record["activity"]
    assert [c["thread"] for c in activity["compiled"]] == [thread_names.NATIVE_THREAD]
    assert list(activity["by_thread"]) == [thread_names.NATIVE_THREAD]
