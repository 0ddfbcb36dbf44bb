"""The seed's first-order whole-model intensity, for comparison with the operator model.

With N parameters at b bytes each and kappa KV bytes per token (all layers):

    I_prefill(S) = 2 N S / (N b + kappa S)     (S prompt tokens in one pass)
    I_decode(S)  = 2 N   / (N b + kappa S)     (one token over S cached positions)

It counts every parameter as a matmul weight for every token (so lm_head for every
prompt position and the embedding table as if multiplied), no attention FLOPs, and
reads all weights including the embedding table. The operator model differs where
those assumptions do: attention FLOPs grow with S, lm_head runs for the last
position only, and the embedding lookup reads B*n rows, not the table.
"""

from __future__ import annotations

import numpy as np


def prefill_intensity(params, weight_bytes_per_param, kv_bytes_per_token, seq_len):
    """2 N S / (N b + kappa S) FLOP/byte."""
    N, b, kappa = float(params), float(weight_bytes_per_param), float(kv_bytes_per_token)
    S = np.asarray(seq_len, dtype=float)
    return 2 * N * S / (N * b + kappa * S)


def decode_intensity(params, weight_bytes_per_param, kv_bytes_per_token, seq_len):
    """2 N / (N b + kappa S) FLOP/byte."""
    N, b, kappa = float(params), float(weight_bytes_per_param), float(kv_bytes_per_token)
    S = np.asarray(seq_len, dtype=float)
    return 2 * N / (N * b + kappa * S)
