"""What every feature shares: the session, the options and their settings, the markers, the
report's records (``records``) and the entries features make for them (``entries``), the kinds
of those entries (``kinds``), the stash keys features pass data through (``stash``), the
plugin's own skips (``outcomes``) and the warnings. No pytest hooks live here, and nothing here
imports torch at import time."""
