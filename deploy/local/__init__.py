"""``det deploy local``: a whole det cluster on this machine, with nothing but pip and Docker.

``up(agents, slots_per_agent, master_port, initial_user_password, state_dir, images)`` starts
the master (embedded PostgreSQL) and N agents with artificial CPU slots in the background;
``down(delete_data, state_dir)`` stops them; ``status(state_dir)`` reports what runs.
``add_parsers(deploy_subparsers)`` adds the ``local`` command to ``det deploy``.
"""

from det.deploy.local.cluster import LocalCluster, down, status, up
from det.deploy.local.commands import add_parsers
from det.deploy.local.engine import NoDockerEngine
from det.deploy.local.paths import STATE_DIR_ENV, default_state_dir

__all__ = [
    "STATE_DIR_ENV",
    "LocalCluster",
    "NoDockerEngine",
    "add_parsers",
    "default_state_dir",
    "down",
    "status",
    "up",
]
