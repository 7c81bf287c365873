"""Pieces shared by the harness modules: the master session, task info, process helpers."""
