"""Loaded by every interpreter that ``coverage_tiers.py`` measures (this folder is first on its
PYTHONPATH): the lines of a process, and of each process it forks, count as the test's named by
``$COVERAGE_TIERS_TEST`` (coverage's dynamic context), whoever started the process."""

from __future__ import annotations

import os

TEST_VARIABLE = "COVERAGE_TIERS_TEST"


def switch_to_the_test() -> None:
    test = os.environ.get(TEST_VARIABLE)
    if not test:
        return
    try:
        import coverage
    except ImportError:
        return
    measuring = coverage.Coverage.current()
    if measuring is not None:
        measuring.switch_context(test)


switch_to_the_test()
# After coverage's own fork handler, which gives the child a data file of its own: coverage
# registers it as it starts from its .pth file, before this module, in every process that
# `coverage_tiers.py run` starts (its tests run in xdist workers, never in its first process).
os.register_at_fork(after_in_child=switch_to_the_test)
