"""``--cudagraph-gpus`` and ``cudagraph_subprocess(gpus=K)``: the GPUs of the host spread over
pytest-xdist's workers and the plugin's test processes, through ``CUDA_VISIBLE_DEVICES``.

:mod:`.host` asks NVML for the host's devices in a throwaway process (the session never
initialises CUDA, nor loads NVML, whose thread would forbid the forks of test processes);
:mod:`.assign` is the pure logic (which devices the session uses, a worker's share, a test
process's reservation); :mod:`.plugin` is the feature's plugin object, one method per event.
What a process was given rides in its environment (``core.devices``), read by the report.
"""
