# Runs before the entrypoint in the task container (sourced: exports reach train.py).
export OMP_NUM_THREADS=1
