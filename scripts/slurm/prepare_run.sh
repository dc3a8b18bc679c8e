# Sourced by the sbatch examples in this folder (not run by itself): check the job's environment, write the
# run directory with `src/train.py backend=mpi mpi.launch=false` (or, when the sourcing script set
# SSGD_SBATCH_BACKEND=torch, `backend=torch dist.launch=false`), and set WORKER to the per-rank command.
#
#   source "$ROOT/scripts/slurm/prepare_run.sh" [hydra overrides...]
#
# In:  SLURM_NTASKS (the allocation: one MPI rank per task), SLURM_SUBMIT_DIR (submit from the repository root,
#      or set SSGD_ROOT), optional SSGD_PYTHON (default <root>/.venv/bin/python, the project's interpreter)
#      and SSGD_RUN_DIR (default <root>/outputs/slurm/<job name>-<job id>).
# Out: ROOT, PY, RUN_DIR, WORKER (array: `python -m mpi4py -m ssgd.run.worker mpi <config>` or `python -m ssgd.run.worker torch
#      <config>`); OMP_NUM_THREADS=1 and the repository's src/ on PYTHONPATH exported.
# Resume: trainer.resume=auto is passed unless the overrides set trainer.resume, so a job that SLURM requeues
#      (`scontrol requeue`, preemption; the same job id, so the same RUN_DIR) continues from its checkpoint.
# Bad input: one line on stderr and exit 2.
set -euo pipefail

fail() { echo "error: $*" >&2; exit 2; }

[[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_NTASKS:-} ]] || fail "run this through sbatch (no SLURM_JOB_ID / SLURM_NTASKS)"
ROOT=${SSGD_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
[[ -f $ROOT/src/train.py ]] || fail "SSGD_ROOT=$ROOT: no src/train.py (submit from the repository root or set SSGD_ROOT)"
PY=${SSGD_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PY ]] || fail "SSGD_PYTHON=$PY: not an executable (run \`make setup\` or point SSGD_PYTHON at the project's python)"
RUN_DIR=${SSGD_RUN_DIR:-$ROOT/outputs/slurm/${SLURM_JOB_NAME:-ssgd}-$SLURM_JOB_ID}

RESUME=(trainer.resume=auto)   # a requeued or preempted job (same job id, same RUN_DIR) continues its checkpoint
for arg in "$@"; do    # the allocation decides the number of ranks: refuse a different cluster.world_size
    case $arg in
        trainer.resume=*) RESUME=() ;;   # the user's own choice wins
        cluster.world_size=*) [[ ${arg#*=} == "$SLURM_NTASKS" ]] \
            || fail "$arg but this job has $SLURM_NTASKS tasks: set the ranks with sbatch --ntasks" ;;
        backend=*|mpi.launch=*|dist.launch=*|hydra.run.dir=*) fail "$arg: set by this script (backend, mpi.launch=false or dist.launch=false, SSGD_RUN_DIR)" ;;
    esac
done

export OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=2 WANDB_SILENT=true
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}      # this checkout's package on every rank
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

echo "job $SLURM_JOB_ID: $SLURM_NTASKS tasks on ${SLURM_JOB_NUM_NODES:-?} node(s) ($SLURM_JOB_NODELIST); run dir $RUN_DIR"
case ${SSGD_SBATCH_BACKEND:-mpi} in
    mpi)   LAUNCH=(backend=mpi mpi.launch=false); MODULE=(-m mpi4py -m ssgd.run.worker mpi) ;;
    torch) LAUNCH=(backend=torch dist.launch=false); MODULE=(-m ssgd.run.worker torch) ;;
    *)     fail "SSGD_SBATCH_BACKEND=$SSGD_SBATCH_BACKEND: must be mpi or torch" ;;
esac
[[ ${SLURM_RESTART_COUNT:-0} == 0 ]] || echo "job $SLURM_JOB_ID: restart ${SLURM_RESTART_COUNT}: continuing from $RUN_DIR/checkpoint.pt"
"$PY" "$ROOT/src/train.py" "${LAUNCH[@]}" "hydra.run.dir=$RUN_DIR" "cluster.world_size=$SLURM_NTASKS" "${RESUME[@]}" "$@"
[[ -f $RUN_DIR/worker_config.yaml ]] || fail "src/train.py wrote no $RUN_DIR/worker_config.yaml"
WORKER=("$PY" "${MODULE[@]}" "$RUN_DIR/worker_config.yaml")
