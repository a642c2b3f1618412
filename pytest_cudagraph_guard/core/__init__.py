"""What every feature shares: the session, the options and their settings, the markers, the
records that features exchange and the warnings. No pytest hooks live here, and nothing here
imports torch at import time."""
