"""Pieces shared by the AWS and GCP deploy programs: master.yaml, dry-run, preflight, state."""
