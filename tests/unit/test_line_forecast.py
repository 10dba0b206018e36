"""hub_cards/line_forecast.py: the band of a line's evaluations per window of samples and its least-squares trend."""

import numpy as np
import pytest

from line_forecast import band, plot_forecast, trend


def line_points(slope_per_million: float, noise: float = 0.03, seed: int = 0) -> list[dict]:
    """Evaluations every 32,000 samples from 10M to 16M around 0.80 + slope x (millions past 10M)."""
    rng = np.random.default_rng(seed)
    seen = np.arange(10_000_000, 16_000_000, 32_000)
    values = 0.80 + slope_per_million * (seen - 10e6) / 1e6 + rng.normal(0, noise, len(seen))
    return [{"samples": int(s), "step": i, "ood_test": float(v), "ood_valid": None} for i, (s, v) in
            enumerate(zip(seen, values))]  # fmt: skip


def test_the_band_is_the_mean_and_spread_of_each_window():
    points = [{"samples": s, "ood_test": v} for s, v in [(100, 0.5), (900, 0.7), (1500, 0.9), (2500, None)]]
    rows = band(points, "ood_test", 1000)
    assert [(r["start"], r["n"]) for r in rows] == [(0.0, 2), (1000.0, 1)], "a window without evaluations is left out"
    assert rows[0]["mean"] == pytest.approx(0.6) and rows[0]["sd"] == pytest.approx(0.1)
    assert rows[0]["samples"] == pytest.approx(500)


def test_the_trend_finds_the_slope_through_the_noise_and_where_it_reaches_a_target(tmp_path):
    points = line_points(0.01)
    rows = band(points, "ood_test", 1e6)
    fitted = trend(rows, fit_from=10e6, target=0.90)
    assert fitted["slope_per_million"] == pytest.approx(0.01, abs=0.003)
    assert fitted["reaches_target_at"] / 1e6 == pytest.approx(20, abs=2.5), "0.80 + 0.01 per million: 0.90 at 20M"
    plot_forecast(points, rows, fitted, "ood_test", tmp_path / "forecast.png")
    assert (tmp_path / "forecast.png").stat().st_size > 0


def test_a_band_that_does_not_rise_never_reaches_the_target():
    rows = band(line_points(-0.005), "ood_test", 1e6)
    assert trend(rows, fit_from=10e6, target=0.90)["reaches_target_at"] is None
    with pytest.raises(ValueError, match="fewer than two windows"):
        trend(rows, fit_from=15e6, target=0.90)
