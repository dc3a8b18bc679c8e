"""`python -m ssgd ...`: the training app (`ssgd-train`, `src/train.py`)."""
from ssgd.run.app import cli

if __name__ == "__main__":
    cli()
