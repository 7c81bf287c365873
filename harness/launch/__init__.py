"""Launchers: start one worker per slot under a distributed framework, output tagged by rank."""
