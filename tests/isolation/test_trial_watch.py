"""The watch of a trial import (``isolation.walk``), with no fork: a module no finder knows is
left to Python's own error, and a watched loader is the loader it wraps in all it does not
watch."""

from __future__ import annotations

import importlib.util
import os

from pytest_cudagraph_guard.isolation.walk import _Watch, _WatchedLoader


def test_a_module_no_finder_knows_is_not_the_watchs_to_find() -> None:
    watch = _Watch({}, os.open(os.devnull, os.O_WRONLY))
    try:
        assert watch.find_spec("no_module_of_this_name_anywhere", None) is None
        assert watch.importing == []
        assert watch.tainted == {}
    finally:
        os.close(watch.told)


def test_a_watched_loader_answers_what_it_does_not_watch_as_its_loader() -> None:
    spec = importlib.util.find_spec("colorsys")
    assert spec is not None
    assert spec.loader is not None
    watch = _Watch({}, -1)
    watched = _WatchedLoader(spec.loader, watch)
    assert watched.get_filename("colorsys") == spec.origin  # type: ignore[attr-defined]
