"""The two built-in metric groups (Determined's names): the Core API reports under them and the
master stores them in ``metrics.metric_group``. Other groups are any string a report names.

Task-side code (Python 3.8, no third-party imports): plain string constants.
"""

TRAINING = "training"
VALIDATION = "validation"
