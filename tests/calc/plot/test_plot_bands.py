"""Sweep charts shade each line's prediction band (the sweep's band columns), and draw none without them."""

import numpy as np
import pytest

from calc.plot import charts as plot


def _bands(fig):
    return {c.get_gid(): c for c in fig.axes[0].collections if (c.get_gid() or "").startswith("band:")}


@pytest.mark.parametrize("kind, lo, hi, options", [
    ("ttft", "ttft_band_lo_s", "ttft_band_hi_s", dict(prompt_len=[128, 1024])),
    ("tpot-batch", "tpot_band_lo_s", "tpot_band_hi_s", dict(batch=[1, 16], prompt_len=[256], output_len=[16])),
])
def test_band_shading_spans_the_band_columns(kind, lo, hi, options):
    frame = plot.sweep_for(kind, hardware=["h100-sxm", "l4"], **options)
    fig = plot.make_chart(kind, hardware=["h100-sxm", "l4"], **options)
    shaded = _bands(fig)
    assert set(shaded) == {"band:h100-sxm", "band:l4"}
    for hw in ("h100-sxm", "l4"):
        rows = frame[frame.hardware == hw]
        y = shaded[f"band:{hw}"].get_paths()[0].vertices[:, 1]
        assert y.min() == pytest.approx(rows[lo].min() * 1e3) and y.max() == pytest.approx(rows[hi].max() * 1e3)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()] if fig.axes[0].get_legend() else \
        [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any("80% band" in t for t in labels)


def test_no_band_columns_no_shading():
    frame = plot.sweep_for("ttft", prompt_len=[128, 1024])
    plain = frame[[c for c in frame.columns if "band" not in c]]
    assert not _bands(plot.ttft_chart(plain))
    assert np.isfinite(frame.ttft_band_lo_s).all()


def test_plotted_data_carries_the_band_edges():
    frame = plot.sweep_for("ttft", prompt_len=[128, 1024])
    data = plot.plotted_data(plot.ttft_chart(frame))["axes"][0]["series"]
    assert data["band_lo:llama-3.1-8b on h100-sxm"]["y"] == pytest.approx(list(frame.ttft_band_lo_s * 1e3), rel=1e-3)
    assert data["band_hi:llama-3.1-8b on h100-sxm"]["y"] == pytest.approx(list(frame.ttft_band_hi_s * 1e3), rel=1e-3)
    assert not [k for k in data if k.startswith("band:")]
