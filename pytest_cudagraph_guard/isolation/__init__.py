"""``@pytest.mark.cudagraph_subprocess``: each marked test runs in a test process of its own,
forked from a zygote (or spawned), and its reports are replayed in the session.

The parent's side is :mod:`.plugin`, :mod:`.runner`, :mod:`.pool` and :mod:`.processes`; the
zygote's is :mod:`.zygote` and :mod:`.forking`; the test process's is :mod:`.child`. What crosses
between them, in one framing, is in :mod:`.wire`.
"""
