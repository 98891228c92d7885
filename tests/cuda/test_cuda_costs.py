"""The device cost model's rates (``ozaki_backend.cuda.costs``; CPU only, no CuPy
needed): :func:`~ozaki_backend.cuda.costs.fit` recovers the rates that made a set of
timings, and a GPU without its own record takes the most conservative of its
generation's."""

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ozaki_backend.cuda import costs

#: The shapes ``scripts/device_rates.py timings`` measures.
SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 16384, 16384), (8192, 512, 8192), (8192, 2048, 8192), (16384, 1024, 16384),
          (8192, 8192, 512), (512, 8192, 8192), (8191, 8191, 8191), (10000, 10000, 10000))

#: A GPU unlike the H200: slower memory, INT8 and FP64, a larger fixed cost.
OTHER = {**costs.H200, "fp64": 49e12, "int8": 1.25e15, "bandwidth": 2.5e12,
         "fixed": 450e-6}

#: The H200's measured rows (the fit's reference in ``scripts/device_rates.py``).
MEASURED = Path(__file__).parents[2] / "docs/data/device-rates-h200-2026-12-03.json"


def rows_of(r, noise=None, distort=None):
    """Timings as the model with rates ``r`` predicts them (times ``1 + noise``; each
    shape's emulation times ``distort[shape]``: the model's error on it)."""
    rows = []
    for (m, k, n) in SHAPES:
        for N in (14, 16):
            rows.append({"shape": [m, k, n], "N": N,
                         "native": costs.native_seconds(m, n, k, r),
                         "emulation": costs.emulation_seconds(m, n, k, N, False, r)})
    if noise is not None:
        for x, e in zip(rows, noise):
            x["emulation"] *= 1.0 + e
    for x in rows:
        x["emulation"] *= (distort or {}).get(tuple(x["shape"]), 1.0)
    return rows


#: The model's error on some shapes (the same code on every GPU: the same error).
DISTORT = {(1024, 1024, 1024): 1.7, (8192, 512, 8192): 1.12, (4096, 4096, 4096): 0.93}


def test_fit_recovers_the_rates_that_made_the_timings():
    """Both GPUs' timings carry the same errors of the model: the fit divides them out
    and finds the rates (exactly: only the solver's rounding)."""
    fitted = costs.fit(rows_of(OTHER, distort=DISTORT), rows_of(costs.H200, distort=DISTORT))
    for key in ("fp64", "int8", "bandwidth", "fixed"):
        assert fitted[key] == pytest.approx(OTHER[key], rel=1e-9), key


def test_fit_of_the_reference_is_its_own_record():
    """The H200's measured rows against themselves give the H200's rates back."""
    rows = json.loads(MEASURED.read_text())["rows"]
    fitted = costs.fit(rows, rows)
    for key, v in costs.H200.items():
        assert fitted[key] == pytest.approx(v, rel=1e-9), key


def test_fit_scales_the_memory_bound_passes_by_the_bandwidth():
    fitted = costs.fit(rows_of(OTHER), rows_of(costs.H200))
    ratio = costs.H200["bandwidth"] / OTHER["bandwidth"]
    for key in ("post_per_element", "gathers_per_element", "gathers_per_entry"):
        assert fitted[key] == pytest.approx(costs.H200[key] * ratio, rel=1e-9)
    # the rates not fitted are the base's
    for key in ("crt_bytes", "native_fixed", "margin"):
        assert fitted[key] == costs.H200[key]


def test_fit_of_noisy_timings_predicts_them_within_the_noise():
    """With 2 % noise on every emulation time the fitted model predicts each timing
    within a few times that noise."""
    rng = np.random.default_rng(0)
    noise = rng.uniform(-0.02, 0.02, 2 * len(SHAPES))
    rows = rows_of(OTHER, noise)
    fitted = costs.fit(rows, rows_of(costs.H200))
    for x in rows:
        m, k, n = x["shape"]
        model = costs.emulation_seconds(m, n, k, x["N"], False, fitted)
        assert abs(model / x["emulation"] - 1) < 0.06


def test_fit_keeps_the_base_rate_a_fit_would_make_negative():
    """Timings with no fixed cost at all (and then some less): the fitted fixed cost
    would be negative; the base's is kept and the other two rates absorb the rest."""
    r = {**OTHER, "fixed": 0.0}
    rows = rows_of(r)
    for x in rows:
        x["emulation"] -= 100e-6
    fitted = costs.fit(rows, rows_of(costs.H200))
    assert fitted["fixed"] == costs.H200["fixed"]
    assert fitted["int8"] > 0 and fitted["bandwidth"] > 0


def test_fit_needs_aligned_rows_measured_on_both():
    rows = rows_of(OTHER)
    with pytest.raises(ValueError, match="at least one"):
        costs.fit(rows, [])
    unaligned = [x for x in rows if x["shape"] == [8191, 8191, 8191]]
    with pytest.raises(ValueError, match="at least one"):
        costs.fit(unaligned, unaligned)


def test_a_gpu_without_a_record_takes_its_generations_slowest_memory():
    table = {"GPU A": {"compute_capability": "90", "rates": {"bandwidth": 3.0e12}},
             "GPU B": {"compute_capability": "90", "rates": {"bandwidth": 2.0e12}},
             "GPU C": {"compute_capability": "80", "rates": {"bandwidth": 1.0e12}}}
    assert costs.rates_of("GPU A", "90", table)["bandwidth"] == 3.0e12
    assert costs.rates_of("GPU D", "90", table)["bandwidth"] == 2.0e12
    assert costs.rates_of("GPU D", "100", table) == costs.H200


def test_the_shipped_table_keeps_every_measured_gpu_its_own_rates():
    """Each record of ``_data/device_rates.json`` names its compute capability and only
    rates the model knows; the H200 keeps the rates it was measured with even where
    another GPU of its generation is listed."""
    path = resources.files("ozaki_backend").joinpath("_data/device_rates.json")
    if not path.is_file():
        pytest.skip("no device rates shipped")
    table = json.loads(path.read_text())["devices"]
    for name, rec in table.items():
        assert set(rec["rates"]) <= set(costs.H200), name
        assert rec["compute_capability"]
        assert costs.rates_of(name, rec["compute_capability"], table)["bandwidth"] == \
            rec["rates"].get("bandwidth", costs.H200["bandwidth"])
    if any(rec["compute_capability"] == "90" for rec in table.values()):
        assert costs.rates_of("NVIDIA H200", "90", table) == costs.H200


def _device_rates_script():
    """``scripts/device_rates.py`` as a module (its helpers need no GPU)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "device_rates.py"
    spec = importlib.util.spec_from_file_location("device_rates_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_refit_keeps_the_pass_costs_measured_by_passes():
    """``fit --write`` replaces a device's record with fitted rates, in which the
    certificate's pass costs are only the H200's scaled by bandwidth; where ``passes
    --write`` measured them on that device, the new record keeps the measurements."""
    dr = _device_rates_script()
    fitted = {"compute_capability": "90", "measured": "later", "command": "fit",
              "rates": {"bandwidth": 3.0e12, "post_per_element": 40e-12}}
    assert dr.merged_record(None, fitted) == fitted
    unmeasured = {"compute_capability": "90", "rates": {"post_per_element": 30e-12}}
    assert dr.merged_record(unmeasured, fitted) == fitted
    measured = {"compute_capability": "90", "passes": "passes --write (earlier)",
                "rates": {"post_per_element": 28e-12, "gathers_per_element": 61e-12,
                          "gathers_per_entry": 14e-12, "bandwidth": 2.0e12}}
    got = dr.merged_record(measured, fitted)
    assert got["rates"] == {"bandwidth": 3.0e12, "post_per_element": 28e-12,
                            "gathers_per_element": 61e-12, "gathers_per_entry": 14e-12}
    assert got["passes"] == measured["passes"] and got["measured"] == "later"
    assert set(dr.PASS_RATES) <= set(costs.H200)


def test_an_odd_leading_dimension_slows_the_modelled_dgemm():
    # k or n odd (the row-major product's leading dimensions): cuBLAS's DGEMM without
    # its vector loads, 1.31x at 8191^3 on the H100 and the H200; an odd m alone is not
    # a leading dimension. Compute-bound sizes, so the ratio is the factor's.
    r = costs.H200
    aligned = costs.native_seconds(8192, 8192, 8192, r) - r["native_fixed"]
    for m, n, k, slow in ((8191, 8191, 8191, True), (8192, 8192, 8191, True),
                          (8192, 8191, 8192, True), (8191, 8192, 8192, False)):
        t = costs.native_seconds(m, n, k, r) - r["native_fixed"]
        want = r["fp64_odd_ld"] if slow else 1.0
        assert t / aligned == pytest.approx(want * (m * n * k) / 8192 ** 3, rel=1e-12)


def test_8191_cubed_phi_1_is_emulated_and_phi_2_with_the_gathers_is_not():
    # Measured on the H100 (2026-12-07): DGEMM 25.8 ms at 8191^3; the emulation at 16
    # moduli with the a-posteriori test ~20.5 ms (phi = 1), at 16-17 with the gathers
    # ~30 ms (phi = 2, as 8192^3 eager). The model must take the first and not the second.
    h100 = costs.rates_of("NVIDIA H100 80GB HBM3", "90", costs._table())
    n = 8191
    native = costs.native_seconds(n, n, n, h100)
    assert native * h100["margin"] > costs.emulation_seconds(n, n, n, 16, True, h100)
    assert native * h100["margin"] < costs.emulation_seconds(n, n, n, 16, True, h100,
                                                             gathers=True)
