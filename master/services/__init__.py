"""The master's services: its behaviour over the database, one module per concept.

Importing any service subscribes the webhooks to the state machine's experiment moves
(``det.master.states.on_experiment_state``): whichever process moves an experiment (the API,
the control loop, a tool) queues its webhook events in the same transaction.
"""

from __future__ import annotations

from det.master.services import webhooks as _webhooks  # noqa: F401  (subscribes; see above)
