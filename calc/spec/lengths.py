"""Request lengths of a workload: the distributions a prompt or output length is drawn
from, and traces (a CSV of prompt_len,output_len per request)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from calc.core import limits as lim
from calc.core.errors import SpecError
from calc.core.files import read_text
from calc.spec.model import _Spec


class _Length(_Spec):
    min: int = Field(default=1, ge=1, le=lim.MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=lim.MAX_TOKENS)

    @model_validator(mode="after")
    def _bounds(self):
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n whole lengths, rounded and clipped to [min, max]."""
        x = np.rint(self._draw(rng, n))
        return np.clip(x, self.min, self.max if self.max is not None else np.inf).astype(np.int64)


class Fixed(_Length):
    dist: Literal["fixed"]
    value: int = Field(ge=1, le=lim.MAX_TOKENS)

    def _draw(self, rng, n):
        return np.full(n, float(self.value))


class Uniform(_Length):
    """Whole numbers uniform on [low, high], both included."""

    dist: Literal["uniform"]
    low: int = Field(ge=1, le=lim.MAX_TOKENS)
    high: int = Field(ge=1, le=lim.MAX_TOKENS)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def _draw(self, rng, n):
        return rng.integers(self.low, self.high + 1, n).astype(float)


class Normal(_Length):
    dist: Literal["normal"]
    mean: float = Field(gt=0, le=lim.MAX_TOKENS)
    std: float = Field(ge=0, le=lim.MAX_TOKENS)

    def _draw(self, rng, n):
        return rng.normal(self.mean, self.std, n)


class LogNormal(_Length):
    """exp(N(ln median, sigma^2)): median ``median``, mean median * exp(sigma^2 / 2)."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=lim.MAX_TOKENS)
    sigma: float = Field(ge=0, le=10)  # exp(10 sigma) is already 2e4-fold

    def _draw(self, rng, n):
        return rng.lognormal(np.log(self.median), self.sigma, n)


Length = Annotated[Fixed | Uniform | Normal | LogNormal, Field(discriminator="dist")]


def read_trace(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A CSV with a header naming ``prompt_len`` and ``output_len`` (other columns ignored);
    each row one request. Errors name the file and the line."""
    text = read_text(path, "trace CSV")
    lines = text.splitlines()
    if len(lines) - 1 > lim.max_csv_rows():
        raise SpecError(path, None, lim.too_many("rows", len(lines) - 1, lim.max_csv_rows(), lim.ROWS_ENV))
    rows = csv.reader(lines)
    header = next(rows, None)
    if header is None:
        raise SpecError(path, None, "empty trace: expected a header prompt_len,output_len and rows")
    names = [h.strip() for h in header]
    missing = [c for c in ("prompt_len", "output_len") if c not in names]
    if missing:
        raise SpecError(path, "line 1", f"header lacks {', '.join(missing)} (got {', '.join(names) or 'nothing'})")
    ip, io = names.index("prompt_len"), names.index("output_len")
    T, G = [], []
    for line, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) <= max(ip, io):
            raise SpecError(path, f"line {line}", f"expected {len(names)} columns, got {len(row)}")
        for col, out in ((ip, T), (io, G)):
            cell = row[col].strip()
            try:
                value = float(cell)
            except ValueError:
                raise SpecError(path, f"line {line}", f"{names[col]} {cell!r} is not a number") from None
            if not np.isfinite(value) or value != round(value) or not 1 <= value <= lim.MAX_TOKENS:
                raise SpecError(path, f"line {line}",
                                f"{names[col]} must be a whole number >= 1 and <= {lim.MAX_TOKENS}, got {cell}")
            out.append(int(value))
    if not T:
        raise SpecError(path, None, "the trace has a header but no rows")
    return np.asarray(T, np.int64), np.asarray(G, np.int64)
