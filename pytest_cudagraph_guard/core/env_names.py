"""The one rule for an environment variable's name that the plugin sets in a test process
(ini ``cudagraph_process_env``, a marker's ``env``): letters, digits and ``_``, not starting
with a digit. Read by :mod:`.options` and :mod:`.markers`."""

from __future__ import annotations

import re
from typing import Final

ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_RULE: Final = "letters, digits and _, not starting with a digit"


def is_env_name(name: object) -> bool:
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None
