"""Import the benchmark scripts of bench/ in tests: `load("harness")` is bench/harness.py under its own name
(the scripts import their siblings by plain name, so bench/ is put on sys.path too)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


def load(name: str) -> ModuleType:
    """bench/<name>.py as module `name` (once; later calls return the same module)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
