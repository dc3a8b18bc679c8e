"""Tests against a real single-node SLURM cluster (marker `slurm`; fixture `slurm_cluster` in conftest.py)."""
