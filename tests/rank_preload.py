"""Imported once by the fork server of tests/torch_ranks.py: what every rank needs, loaded before any rank exists.

The server is a fresh interpreter with a single thread (one intra-op thread, set before any operator runs), so the
ranks it forks inherit these modules and no thread state: forking a process that has run threads (such as
pytest itself, after an in-process training) can leave a child stuck on a lock one of those threads held.
"""
import torch

torch.set_num_threads(1)

import torch.distributed  # noqa: E402,F401
import torch.nn.parallel  # noqa: E402,F401

import ssgd.run.build  # noqa: E402,F401
import ssgd.comm.executors.torch_dist  # noqa: E402,F401
import ssgd.ddp  # noqa: E402,F401
import ssgd.worlds.torch_dist  # noqa: E402,F401
from torch_ranks import warm_up  # noqa: E402

warm_up()
