"""LSTMLM: word-level LSTM language model for PTB-shaped token data (the gTop-k code's `lstm`)."""
from __future__ import annotations

from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.errors import BadArgument, ConfigError
from ssgd.models.dropout import GenDropout

INIT_RANGE = 0.1
"""Uniform init range of the embedding and the decoder, as in the gTop-k code (after Zaremba et al.)."""


class LSTMLM(nn.Module):
    """embedding(vocab, emb) -> GenDropout -> [single-layer LSTM -> GenDropout] x layers -> linear(hidden, vocab).

    The layers are separate one-layer `nn.LSTM`s so that the dropout between them comes from the
    per-rank generator (the `dropout` argument of a multi-layer `nn.LSTM` draws from the global RNG).
    Every forward starts from zero hidden and cell states: samples are independent and nothing is
    carried between batches.

    Args:
        spec: a tokens spec; spec.num_classes is the vocabulary size.
        emb, hidden: embedding and LSTM widths, positive.
        layers: number of stacked LSTMs, >= 1.
        dropout: probability in [0, 1); the gTop-k code's keep probability 0.35 is dropout = 0.65.

    Input int64 [B, T] token ids in [0, vocab) -> logits float32 [B, T, vocab].
    """

    def __init__(self, spec: DataSpec, emb: int = 200, hidden: int = 200, layers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        if spec.kind != "tokens":
            raise ConfigError(
                f"model=lstm needs a token dataset, but dataset {spec.name or '?'} has kind "
                f"'{spec.kind}'; use model=fnn3, cnn or resnet20 for images"
            )
        for key, value, low in (("emb", emb, 1), ("hidden", hidden, 1), ("layers", layers, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BadArgument(key, value, f"must be an int >= {low}")
        vocab = spec.num_classes
        self.embedding = nn.Embedding(vocab, emb)
        self.drop_in = GenDropout(dropout)
        self.lstms = nn.ModuleList(nn.LSTM(emb if i == 0 else hidden, hidden, batch_first=True)
                                   for i in range(layers))
        self.drops = nn.ModuleList(GenDropout(dropout) for _ in range(layers))
        self.decoder = nn.Linear(hidden, vocab)
        nn.init.uniform_(self.embedding.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.uniform_(self.decoder.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x: Tensor) -> Tensor:
        """x: int64 [B, T] -> float32 [B, T, vocab]."""
        h = self.drop_in(self.embedding(x))
        for lstm, drop in zip(self.lstms, self.drops):
            h, _ = lstm(h)
            h = drop(h)
        return self.decoder(h)
