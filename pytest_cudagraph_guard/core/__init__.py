"""The shared core: settings, diagnosis, config state, markers and the records that features
exchange. No pytest hooks live here, and nothing here imports torch at import time."""
