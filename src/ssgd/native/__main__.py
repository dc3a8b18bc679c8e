"""`python -m ssgd.native`: build the C kernels now (make setup runs it); exit 1 with one line if it cannot."""
import sys

from ssgd.native import build

try:
    print(f"ssgd.native: built {build().name}")
except RuntimeError as err:
    print(f"ssgd.native: {err}; the torch merge and block peaks will be used", file=sys.stderr)
    sys.exit(1)
