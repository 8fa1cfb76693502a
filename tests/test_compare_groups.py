"""Grouped `dare compare`: statistics over seeds equal scipy's, verdicts, groups found from run.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from dare.errors import DareError
from dare.eval.compare import compare_runs
from dare.eval.stats import paired_difference, summarize


def test_summary_interval_equals_scipy_bootstrap():
    x = np.random.default_rng(7).normal(0.5, 0.04, size=6)
    s = summarize(x)
    ref = sps.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=9999, method="percentile", random_state=0)
    assert s.n == 6 and s.mean == pytest.approx(x.mean(), abs=0) and s.std == pytest.approx(x.std(ddof=1), abs=0)
    assert (s.ci_low, s.ci_high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert s.ci_low < s.mean < s.ci_high
    # by hand: three seeds of the demo's RL stage on one AMD machine (0.522, 0.460, 0.522): mean 0.50133, std 0.035796
    s3 = summarize([0.522, 0.460, 0.522])
    assert s3.mean == pytest.approx(0.501333, abs=1e-6) and s3.std == pytest.approx(0.0357957, abs=1e-7)
    assert 0.460 <= s3.ci_low <= s3.mean <= s3.ci_high <= 0.522
    assert summarize([0.3]) == summarize([0.3]).__class__(1, 0.3, 0.0, None, None)
    assert (summarize([0.2, 0.2]).ci_low, summarize([0.2, 0.2]).ci_high) == (0.2, 0.2)


def test_paired_difference_equals_scipy():
    rng = np.random.default_rng(3)
    a = rng.normal(0.45, 0.03, size=5)
    b = a + rng.normal(0.05, 0.02, size=5)
    d = paired_difference(a, b)
    ref = sps.bootstrap((b, a), lambda y, x, axis=-1: np.mean(y, axis=axis) - np.mean(x, axis=axis), paired=True,
                        confidence_level=0.95, n_resamples=9999, method="percentile", random_state=0)
    t = sps.ttest_rel(b, a).confidence_interval(0.95)
    assert d.mean == pytest.approx(float(np.mean(b - a)), abs=1e-15)
    assert (d.ci_low, d.ci_high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert (d.t_low, d.t_high) == (pytest.approx(t.low, abs=1e-15), pytest.approx(t.high, abs=1e-15))
    # paired=True resamples seeds: the same as resampling the per-seed differences
    ref1 = sps.bootstrap((b - a,), np.mean, confidence_level=0.95, n_resamples=9999, method="percentile", random_state=0)
    assert (d.ci_low, d.ci_high) == pytest.approx((ref1.confidence_interval.low, ref1.confidence_interval.high), abs=1e-12)
    with pytest.raises(ValueError, match="same length"):
        paired_difference([1.0, 2.0], [1.0])


def test_same_distribution_is_not_significant_and_a_clear_shift_is():
    rng = np.random.default_rng(1)
    base = rng.normal(0.5, 0.05, size=8)  # per-seed difficulty shared by both settings (paired)
    same_a = base + rng.normal(0, 0.02, size=8)
    same_b = base + rng.normal(0, 0.02, size=8)
    d = paired_difference(same_a, same_b)
    assert d.ci_low < 0 < d.ci_high and not d.significant and d.verdict == "not significant"
    shifted = base + 0.1 + rng.normal(0, 0.02, size=8)
    d = paired_difference(same_a, shifted)
    assert 0 < d.ci_low < d.ci_high and 0 < d.t_low and d.significant and d.verdict == "significant"
    # over many draws from one distribution the verdict is rarely "significant" (5 % nominal)
    rng = np.random.default_rng(2)
    hits = sum(paired_difference(*rng.normal(0.5, 0.05, size=(2, 8)), n_resamples=999).significant for _ in range(100))
    assert hits <= 12
    # three seeds of the same sign: the bootstrap interval excludes 0, the paired-t interval does not: not significant
    d3 = paired_difference([0.40, 0.42, 0.41], [0.41, 0.45, 0.415])
    assert d3.ci_low > 0 and d3.t_low < 0 and not d3.significant


def _run(d, seed, algo, acc, reward):
    (d / "eval").mkdir(parents=True)
    (d / "eval" / "after.json").write_text(json.dumps({"results": [
        {"name": "sudoku", "n": 50, "accuracy": acc, "mean_reward": reward, "nfe": 17, "tokens_per_second": 1.0}]}))
    spec = {"algorithm": {"name": algo, "params": {}}, "train": {"seed": seed, "max_steps": 2}, "eval": {"seed": seed},
            "output": {"dir": str(d), "overwrite": False}}
    (d / "run.json").write_text(json.dumps({"spec_hash": f"{algo}{seed}", "source": None, "spec": spec}))


def test_runs_differing_only_by_seed_are_grouped(tmp_path):
    accs = {"d1": [0.40, 0.44, 0.42], "tracerl": [0.50, 0.55, 0.52]}
    entries = []
    for algo, vals in accs.items():
        for seed, acc in enumerate(vals):
            _run(tmp_path / f"{algo}-{seed}", seed, algo, acc, acc + 0.2)
            entries.append(f"{algo}-{seed}={tmp_path / f'{algo}-{seed}'}")
    md, js, png = compare_runs(entries, tmp_path / "out")
    data = json.loads(js.read_text())["grouped"]
    g1, g2 = data["groups"]
    assert (g1["label"], g2["label"]) == ("algorithm.name=d1", "algorithm.name=tracerl")
    acc1 = next(s for s in g1["stats"] if s["metric"] == "accuracy")
    assert acc1["seeds"] == [0, 1, 2] and acc1["values"] == [0.40, 0.44, 0.42] and acc1["n"] == 3
    assert acc1["mean"] == pytest.approx(0.42) and acc1["std"] == pytest.approx(0.02)
    (diff,) = [d for d in data["differences"] if d["metric"] == "accuracy"]
    assert diff["mean"] == pytest.approx((0.10 + 0.11 + 0.10) / 3) and diff["seeds"] == [0, 1, 2]
    ref = paired_difference([0.40, 0.44, 0.42], [0.50, 0.55, 0.52])
    assert (diff["ci_low"], diff["ci_high"], diff["verdict"]) == (ref.ci_low, ref.ci_high, ref.verdict)
    text = md.read_text()
    assert "| algorithm.name=d1 | sudoku | accuracy | 3 | 0.4200 | 0.0200 |" in text
    assert "| algorithm.name=tracerl - algorithm.name=d1 | sudoku | accuracy | 0, 1, 2 | +0.1033 |" in text
    assert "How to read the groups" in text and "| d1-0 | sudoku | 0.4000 |" in text  # every run still listed
    assert png.stat().st_size > 5000


def test_single_runs_compare_as_before(tmp_path):
    _run(tmp_path / "a", 0, "d1", 0.4, 0.6)
    _run(tmp_path / "b", 0, "tracerl", 0.5, 0.7)
    md, js, _ = compare_runs([f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}"], tmp_path / "out")
    assert "grouped" not in json.loads(js.read_text()) and "## Groups" not in md.read_text()


def test_gain_over_the_start_is_a_paired_difference(tmp_path):
    """One setting over 3 seeds, before and after training: two groups, and the after - before difference per seed."""
    entries = []
    for seed, (before, after) in enumerate([(0.416, 0.522), (0.416, 0.460), (0.416, 0.522)]):
        d = tmp_path / f"seed={seed}"
        _run(d, seed, "tracerl", after, after)
        (d / "eval" / "before.json").write_text(json.dumps({"results": [
            {"name": "sudoku", "n": 500, "accuracy": before, "mean_reward": before, "nfe": 17, "tokens_per_second": 1.0}]}))
        entries.insert(seed, (f"seed={seed} (before)", d, "before"))
        entries.append((f"seed={seed}", d, "after"))
    md, js, _ = compare_runs(entries, tmp_path / "out")
    data = json.loads(js.read_text())["grouped"]
    assert [g["label"] for g in data["groups"]] == ["all seeds (before)", "all seeds (after)"]
    gain = next(d for d in data["differences"] if d["metric"] == "accuracy")
    assert gain["mean"] == pytest.approx((0.106 + 0.044 + 0.106) / 3) and gain["seeds"] == [0, 1, 2]
    ref = paired_difference([0.416] * 3, [0.522, 0.460, 0.522])
    assert (gain["ci_low"], gain["ci_high"], gain["t_low"], gain["t_high"]) == (ref.ci_low, ref.ci_high, ref.t_low, ref.t_high)
    assert "| all seeds (after) - all seeds (before) | sudoku | accuracy | 0, 1, 2 | +0.0853 |" in md.read_text()


def test_a_sweep_directory_stands_for_its_runs(tmp_path):
    sweep = tmp_path / "sweep"
    runs = []
    for algo, vals in {"d1": [0.40, 0.44], "spg": [0.41, 0.47]}.items():
        for seed, acc in enumerate(vals):
            name = f"algorithm.name={algo},seed={seed}"
            _run(sweep / name, seed, algo, acc, acc)
            runs.append({"name": name, "state": "finished"})
    runs.append({"name": "algorithm.name=spg,seed=2", "state": "failed"})  # no evaluation: left out
    (sweep / "sweep.json").write_text(json.dumps({"runs": runs}))
    md, js, _ = compare_runs([f"grid={sweep}"], tmp_path / "out")
    data = json.loads(js.read_text())
    assert [r["label"] for r in data["rows"]] == [f"grid/{r['name']}" for r in runs[:4]]
    assert [g["label"] for g in data["grouped"]["groups"]] == ["algorithm.name=d1", "algorithm.name=spg"]
    with pytest.raises(DareError, match="no run to compare"):
        compare_runs([f"x={_empty_sweep(tmp_path)}"], tmp_path / "out2")


def _empty_sweep(tmp_path):
    d = tmp_path / "empty-sweep"
    d.mkdir()
    (d / "sweep.json").write_text(json.dumps({"runs": [{"name": "seed=0", "state": "failed"}]}))
    return d
