"""A test's skip raised from the plugin's own code, and how the plugin tells such an outcome
from an error."""

from __future__ import annotations

from typing import Final, NoReturn

import pytest

NO_TORCH: Final = "torch is not installed"
NO_CUDA: Final = "CUDA is not available"


def skip_test(reason: str) -> NoReturn:
    """Skips the running test from the plugin's code, the skip shown at the test's own location
    (as pytest shows a ``skipif`` marker's), not at the plugin's line that raised it."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


def is_skip_or_xfail(exc: BaseException) -> bool:
    """An outcome raised as an exception (``pytest.skip``, ``pytest.xfail``), not an error."""
    return isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception))
