"""A record's ``uses_plugin``: true for every test under a fixture, a marker or a suite option of
the plugin, false for the others. Real in-process sessions."""

from __future__ import annotations

import pytest

from ..helpers import records_by_name

SUITE = """
import pytest

def test_plain():
    pass

@pytest.mark.cudagraph_main_thread
def test_kept_in_the_main_thread():
    pass

def test_with_a_fixture(inductor_config):
    pass
"""


@pytest.mark.parametrize(
    ("option", "plain"), [((), False), (("--cudagraph-on",), True)], ids=["none", "on"]
)
def test_uses_plugin_follows_the_fixtures_markers_and_options(
    ourtester: pytest.Pytester, option: tuple[str, ...], plain: bool
) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest("--cudagraph-report=json:r.json", *option)
    result.assert_outcomes(passed=3)
    found = records_by_name(ourtester.path / "r.json")
    assert {name: record["uses_plugin"] for name, record in found.items()} == {
        "test_plain": plain,
        "test_kept_in_the_main_thread": True,
        "test_with_a_fixture": True,
    }
