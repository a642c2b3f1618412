"""``@pytest.mark.cudagraph_thread``: a test's call phase in fresh non-main threads."""
