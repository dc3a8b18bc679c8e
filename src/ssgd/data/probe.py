"""A dataset's size and shape without loading it, for the loaders where that is cheap.

The MPI launcher and the thread backend check P x batch size against the size, and estimate the memory
of P ranks from the model the shape implies, before any rank starts or any state is allocated
(`ssgd.run.build.preflight`). Loaders of the user's own files have no probe: their ranks check after loading.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ssgd.data.base import DataSpec
from ssgd.data.embedded import mnist_embedded, mnist_embedded_size
from ssgd.data.synthetic import synthetic_images, synthetic_images_size, synthetic_tokens, synthetic_tokens_size

PROBES: dict[Callable[..., Any], Callable[..., tuple[int, DataSpec]]] = {
    mnist_embedded: mnist_embedded_size,
    synthetic_images: synthetic_images_size,
    synthetic_tokens: synthetic_tokens_size,
}


def probe(loader: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[int, DataSpec] | None:
    """(training samples, spec) that loader(**kwargs) would return, or None where only loading can tell.
    Raises ConfigError (or ValueError/TypeError) for arguments the loader would refuse."""
    size = PROBES.get(loader)
    if size is None:
        return None
    inspect.signature(loader).bind(**kwargs)       # TypeError for a keyword the loader does not take
    return size(**kwargs)
