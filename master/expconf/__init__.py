"""Experiment configuration: Determined 0.38's experiment YAML, validated and fully defaulted.

Public API::

    parse_experiment_config(text_or_dict, cluster_defaults=None, *, seed_factory, name_factory)
        -> ExperimentConfig        # .to_dict() / .resolved(), .warnings
    merge_cluster_defaults(config_dict, task_container_defaults, checkpoint_storage) -> dict
    merge_template(config_dict, template_dict) -> dict   # a config template under the config
    apply_overrides(config_dict, ["searcher.max_trials=4", ...]) -> dict
    load_yaml(text) -> dict
    redact(config_dict) -> dict / redact_text(yaml_text) -> str   # registry secrets as ********
    docker_notes(config_dict) -> [str]   # warnings for fields Docker agents ignore
    ConfigError(message, field_path)   # message: one line naming the field path and the reason

Accepted fields (defaults in brackets; ``null`` anywhere means "the default"):

- ``name`` [generated "Experiment (…)"], ``description``, ``labels`` [[]], ``workspace`` and
  ``project`` (names, together: where the experiment goes), ``template`` (a configuration
  template's name; the master merges it under the config and drops the key), ``entrypoint``
  (string or list of strings; required).
- ``hyperparameters``: ``{type: const, val}``, ``{type: int|double, minval, maxval, count}``,
  ``{type: log, minval, maxval, base [10], count}``, ``{type: categorical, vals}``; a bare value is
  const; a mapping without ``type`` is a nested group. minval < maxval (finite numbers),
  count >= 1, base > 0 and not 1, vals non-empty, ``val`` given (``null`` is a value); the grid
  searcher needs ``count`` on int/double/log. The searcher reads the same models.
- ``searcher`` (required; ``name`` picks the kind): common ``metric`` (required),
  ``smaller_is_better`` [true], ``source_trial_id``, ``source_checkpoint_uuid``, ``max_length``
  (deprecated). ``single``; ``random`` ``max_trials``, ``max_concurrent_trials`` [16]; ``grid``
  ``max_concurrent_trials`` [16]; ``adaptive_asha`` ``max_trials``, ``time_metric``, ``max_time``,
  ``mode`` [standard] (aggressive/standard/conservative), ``divisor`` [4], ``max_rungs`` [5],
  ``bracket_rungs`` [[]], ``max_concurrent_trials`` [16], ``stop_once`` (deprecated);
  ``async_halving`` ``num_rungs``, ``max_trials``, ``time_metric``, ``max_time``, ``divisor``,
  ``max_concurrent_trials``, ``stop_once``. Refused: ``custom`` (removed in 0.38), ``pbt``,
  ``adaptive``, ``adaptive_simple``, ``sync_halving``; ASHA with ``max_length`` instead of
  ``max_time``/``time_metric``.
- ``resources``: ``slots_per_trial`` [1], ``max_slots``, ``weight`` [1], ``priority`` (1-99),
  ``resource_pool`` [""], ``shm_size`` (bytes or "4G", resolved to bytes), ``devices``
  (``{host_path, container_path, mode [mrw]}`` or "host:container[:mode]"), ``native_parallel``,
  ``is_single_node``, ``agent_label``/``slots`` (ignored).
- ``checkpoint_storage`` (from the master's when absent), on ``type``: ``shared_fs`` {host_path,
  storage_path, container_path [/determined_shared_fs], propagation [rprivate]}, ``directory``
  {container_path}, ``s3`` {bucket, prefix, access_key, secret_key, endpoint_url}, ``gcs``
  {bucket, prefix}; all with ``save_experiment_best`` [0], ``save_trial_best`` [1],
  ``save_trial_latest`` [1]. ``azure``/``hdfs`` are refused.
- ``checkpoint_policy`` [best] (best/all/none), ``min_validation_period`` /
  ``min_checkpoint_period`` [{batches: 0}] (one of batches/records/epochs),
  ``perform_initial_validation`` [false], ``max_restarts`` [5], ``records_per_epoch`` [0],
  ``scheduling_unit`` [100], ``preemption_timeout``, ``debug`` [false], ``data`` [{}].
- ``environment``: ``image`` (string or {cpu, cuda, rocm}; resolved to the map),
  ``environment_variables`` (["K=V"] or {cpu, cuda, rocm}; resolved to the map),
  ``force_pull_image``, ``registry_auth``, ``add_capabilities``, ``drop_capabilities``, ``ports``;
  ``pod_spec``, ``proxy_ports``, ``slurm``, ``pbs`` accepted and ignored (the
  experiment gets a warning event: see ``docker_notes``).
- ``bind_mounts``: [{host_path (absolute), container_path, read_only [false], propagation
  [rprivate]}].
- ``reproducibility.experiment_seed`` [generated at creation and stored].
- Accepted as Determined accepts them: ``profiling``, ``optimizations``, ``log_policies`` [CUDA
  OOM, ECC error], ``integrations``, ``tensorboard_storage``, ``data_layer``, ``security``,
  ``internal``.

Deprecated fields still load; ``ExperimentConfig.warnings`` lists what to change.
"""

from .environment import (
    SECRET_KEYS,
    STORAGE_SECRET_KEYS,
    docker_notes,
    hide_secrets,
    redact,
    redact_text,
    unredact,
)
from .errors import ConfigError
from .merge import apply_overrides, merge_cluster_defaults, merge_template
from .parse import default_name, default_seed, load_yaml, parse_experiment_config
from .schema import (
    DEFAULT_CPU_IMAGE,
    DEFAULT_CUDA_IMAGE,
    ExperimentConfig,
    parse_memory_size,
)

__all__ = [
    "DEFAULT_CPU_IMAGE",
    "DEFAULT_CUDA_IMAGE",
    "SECRET_KEYS",
    "STORAGE_SECRET_KEYS",
    "ConfigError",
    "ExperimentConfig",
    "apply_overrides",
    "default_name",
    "default_seed",
    "docker_notes",
    "hide_secrets",
    "load_yaml",
    "merge_cluster_defaults",
    "merge_template",
    "parse_experiment_config",
    "parse_memory_size",
    "redact",
    "redact_text",
    "unredact",
]
