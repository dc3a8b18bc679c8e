"""How a run ends when it ends without a result, and the exit status that says so.

Exit statuses of `src/train.py` and of every MPI rank (docs/faults.md):
  0    the run finished;
  2    bad input (`ConfigError`): one line naming the offending key or file;
  3    the training loss stopped being finite (`summary.json` has `diverged_at_step`);
  130  interrupted by SIGINT (Ctrl-C), 143 by SIGTERM (how SLURM preempts): a checkpoint was written at the
       step boundary where the run stopped;
  any other non-zero status: a rank failed (an exception or a signal that killed it).
"""

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_FAILED = 1


class ConfigError(ValueError):
    """Bad configuration or missing input files: reported to the user as one line, never a trace.

    Raise it with a message that names the offending config key or file and says what is allowed."""


class BadArgument(ConfigError):
    """A constructor refuses the value of its argument `name`: "name=value: reason".

    `ssgd.config.config_errors` turns it into a ConfigError naming the config key (`compressor.compress.name=...`)
    from `name`, without reading the message; a plain ValueError is reported as "key: message". A
    ConfigError (and so a ValueError): outside a config, it is the one line itself."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"{name}={value!r}: {reason}")
        self.name, self.value, self.reason = name, value, reason


class DiskFull(ConfigError):
    """A write of the run's outputs failed for want of space (ENOSPC or a quota, in any of its disguises):
    one line naming the file, the bytes it needed and those free (exit status 2). The temporary file is
    removed and what was written before is intact (ssgd.utils.atomic)."""

    def __init__(self, message: str, path: str, needed: int, free: int | None) -> None:
        super().__init__(message)
        self.path, self.needed, self.free = path, needed, free


class RunEnded(Exception):
    """A run that ended without a result: `status` is the exit status, `str(self)` the one line for the user."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Interrupted(RunEnded):
    """SIGINT or SIGTERM stopped the run at a step boundary (after writing a checkpoint, unless `checkpoint`
    is None: a second signal, or state that was not finite)."""

    def __init__(self, message: str, status: int, step: int, checkpoint: str | None) -> None:
        super().__init__(message, status)
        self.step, self.checkpoint = step, checkpoint


class AlreadyFinished(Exception):
    """`trainer.resume` into a run directory whose run already finished (its checkpoint is at the last step
    and `summary.json` exists): nothing to do, and nothing is changed; `summary` is the run's summary."""

    def __init__(self, message: str, summary: dict) -> None:
        super().__init__(message)
        self.summary = summary
