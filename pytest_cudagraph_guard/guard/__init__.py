"""The leak guard: a test that changes torch's dynamo or inductor config, or the variables torch
reads, is warned (or failed) and the config put back for the next test.

:mod:`.plugin` is the guard itself (``--cudagraph-guard``); :mod:`.state` takes the guarded state
at one moment and :mod:`.diff` says what changed between two and puts it back; :mod:`.fixtures`
are the config fixtures (``inductor_config``, ``dynamo_config``, ``cudagraphs``) and
:mod:`.config_guard` the public ``ConfigGuard`` they hand out.
"""
