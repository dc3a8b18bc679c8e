"""Keras 3 side of `bench/dlbench.py`: the same DLBench models on TensorFlow and on JAX.

One Keras definition per workload serves both tools (`KERAS_BACKEND=tensorflow` or `jax`, set by
the driver before this process starts); each has exactly the canonical parameter count of
`dlbench_workloads.py` (checked by the driver against PyTorch's). Images are channels-last (the
layout TensorFlow's CPU convolutions take); the shapes are otherwise those of the PyTorch models:
AlexNet-R pools with floor rounding as its Torch7 definition, ResNet-56 uses option-A shortcuts
(stride-2 subsampling + zero channels) and batch norm with PyTorch's epsilon and momentum.

A step is `model.train_on_batch(x, y)`: forward, sparse softmax cross-entropy from logits, backward
and SGD (lr 0.01, momentum 0.9), compiled the way Keras does by default (`jit_compile="auto"`: XLA
under JAX; a `tf.function` graph without XLA under TensorFlow on a CPU-only machine). It returns the
loss as a host value, so the step has finished when the timer stops.

Runs in `.venv-tools` (no torch there): imports numpy, keras and the backend only.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlbench_workloads import (FCN5_HIDDEN, FCNR_HIDDEN, LEARNING_RATE, LSTM_HIDDEN, LSTM_LAYERS,  # noqa: E402
                               MOMENTUM, Workload)

TOOLS = {"tensorflow": "tensorflow", "jax": "jax"}
"""tool name -> KERAS_BACKEND."""

BN_EPSILON = 1e-5         # PyTorch's BatchNorm2d defaults (Keras: 1e-3 and 0.99)
BN_MOMENTUM = 0.9


def set_threads(tool: str, threads: int) -> None:
    """Size TensorFlow's pools before it starts (JAX/XLA follows the CPU affinity the driver set)."""
    if tool == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def _shortcut_a(keras, out_channels: int):
    """Option-A shortcut as a layer: x[:, ::2, ::2, :] then zero channels up to `out_channels`."""
    ops = keras.ops

    class ShortcutA(keras.layers.Layer):
        def call(self, x):
            x = x[:, ::2, ::2, :]
            extra = out_channels - x.shape[-1]
            return ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, extra]])

        def compute_output_shape(self, shape):
            return (shape[0], (shape[1] + 1) // 2, (shape[2] + 1) // 2, out_channels)

    return ShortcutA()


def _resnet56(keras, shape: tuple[int, int, int], classes: int):
    L = keras.layers

    def bn():
        return L.BatchNormalization(epsilon=BN_EPSILON, momentum=BN_MOMENTUM)

    def conv(width: int, stride: int = 1):
        return L.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)

    inp = keras.Input(shape)
    x = L.ReLU()(bn()(conv(16)(inp)))
    width_in = 16
    for width, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(9):
            s = stride if i == 0 else 1
            out = L.ReLU()(bn()(conv(width, s)(x)))
            out = bn()(conv(width)(out))
            short = _shortcut_a(keras, width)(x) if (s != 1 or width_in != width) else x
            x = L.ReLU()(L.Add()([out, short]))
            width_in = width
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(classes)(x))


def build_model(w: Workload):
    """The Keras definition of workload `w` (channels-last images)."""
    import keras

    L = keras.layers
    if w.key in ("fcn5", "fcnr"):
        hidden = FCN5_HIDDEN if w.key == "fcn5" else FCNR_HIDDEN
        layers = [keras.Input(w.input_shape if w.key == "fcn5" else (784,))]
        layers += [L.Dense(h, activation="sigmoid") for h in hidden] + [L.Dense(w.classes)]
        return keras.Sequential(layers)
    if w.key == "alexnet_r":
        c, h, wd = w.input_shape
        return keras.Sequential([
            keras.Input((h, wd, c)),
            L.Conv2D(32, 5, padding="same"), L.MaxPooling2D(3, 2), L.ReLU(),
            L.Conv2D(32, 5, padding="same"), L.ReLU(), L.MaxPooling2D(3, 2),
            L.Conv2D(64, 5, padding="same"), L.ReLU(), L.AveragePooling2D(3, 2),
            L.Flatten(), L.Dense(w.classes)])
    if w.key == "resnet56":
        c, h, wd = w.input_shape
        return _resnet56(keras, (h, wd, c), w.classes)
    if w.key == "lstm":
        layers = [keras.Input(w.input_shape, dtype="int32"), L.Embedding(w.classes, LSTM_HIDDEN)]
        layers += [L.LSTM(LSTM_HIDDEN, return_sequences=True) for _ in range(LSTM_LAYERS)]
        return keras.Sequential(layers + [L.Dense(w.classes)])
    raise ValueError(f"no Keras definition of workload {w.key!r}")


def synthetic_batch(w: Workload, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One fixed mini-batch (channels-last images, int32 tokens)."""
    rng = np.random.default_rng(seed)
    if w.kind == "tokens":
        x = rng.integers(0, w.classes, (batch, *w.input_shape), dtype=np.int32)
        return x, np.roll(x, -1, axis=1)
    shape = w.input_shape if len(w.input_shape) != 3 else (w.input_shape[1], w.input_shape[2], w.input_shape[0])
    if w.key == "fcnr":
        shape = (784,)
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
    return x, rng.integers(0, w.classes, (batch,), dtype=np.int32)


def prepare(tool: str, w: Workload, batch: int, warmup: int) -> tuple[Callable[[], float], dict]:
    """Build and compile workload `w`, warm up (>= 1 step: tracing / XLA compilation); returns (one
    training step returning its loss, facts of the cell)."""
    import keras

    if keras.backend.backend() != TOOLS[tool]:
        raise RuntimeError(f"KERAS_BACKEND is {keras.backend.backend()!r}, expected {TOOLS[tool]!r}")
    keras.utils.set_random_seed(0)
    t0 = time.perf_counter()
    model = build_model(w)
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = synthetic_batch(w, batch)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(max(warmup, 1)):
        model.train_on_batch(x, y)
    warmup_s = time.perf_counter() - t0
    params = int(sum(np.prod(v.shape) for v in model.trainable_weights))
    return (lambda: float(np.asarray(model.train_on_batch(x, y)).reshape(-1)[0])), {
        "params": params, "params_raw": params, "setup_s": setup_s, "warmup_s": warmup_s,
        "jit_compile": bool(model.jit_compile)}


def versions(tool: str) -> dict[str, str]:
    import keras

    out = {"keras": keras.__version__, "keras_backend": keras.backend.backend()}
    if tool == "tensorflow":
        import tensorflow as tf

        out.update(tensorflow=tf.__version__,
                   tf_intra_op_threads=str(tf.config.threading.get_intra_op_parallelism_threads()),
                   tf_inter_op_threads=str(tf.config.threading.get_inter_op_parallelism_threads()))
    else:
        import jax

        out.update(jax=jax.__version__, jaxlib=jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
                   xla_flags=os.environ.get("XLA_FLAGS", ""))
    return out
