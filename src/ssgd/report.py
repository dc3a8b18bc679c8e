"""`python -m ssgd.report RUN_OR_SWEEP_DIR`: a run's figure, or a sweep's table and overlay (ssgd.utils.result_files)."""
from ssgd.utils.result_files import main

if __name__ == "__main__":
    raise SystemExit(main())
