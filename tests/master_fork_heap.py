"""Imported last by the tests' master fork server (tests/master_fork.py, ``PRELOAD``), after
det's master: collects the server's heap once and freezes it (``gc.freeze``), so that a forked
master's own start-up collection (``det.master.server.freeze_startup_heap``, a full
``gc.collect`` before its ``gc.freeze``) skips the 900 modules every fork inherits and scans only
what the master made since: a forked master used 0.15-0.17 CPU-s from the fork to its first
answer, 0.04-0.05 with the server's heap frozen (five starts each), and about 250 masters are
forked in a run. What the master's freeze is for (what is alive once it serves kept out of later
collections) holds as before: the objects the fork server made are frozen in a master either way."""

import gc

gc.collect()
gc.freeze()
