"""Core API: what training code calls from inside a task container."""
