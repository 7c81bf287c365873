"""What the task container runs: ``python3 -m det.exec.run -- <entrypoint…>``."""
