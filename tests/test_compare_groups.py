"""Grouped `dare compare`: statistics over seeds equal scipy's, verdicts, groups found from run.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from dare.errors import DareError
from dare.report.compare import compare_runs
from dare.report.stats import apply_holm, holm, item_bootstrap, iqm, paired_difference, power, seeds_for_power, summarize


def test_group_interval_is_the_t_interval_and_bca_from_20_seeds():
    x = np.random.default_rng(7).normal(0.5, 0.04, size=6)
    s = summarize(x)
    ref = sps.t.interval(0.95, 5, loc=x.mean(), scale=sps.sem(x))
    assert s.n == 6 and s.mean == pytest.approx(x.mean(), abs=0) and s.std == pytest.approx(x.std(ddof=1), abs=0)
    assert s.method == "t" and (s.ci_low, s.ci_high) == pytest.approx(ref, abs=1e-12)
    # by hand: 0.522, 0.460, 0.522: mean 0.501333, std 0.0357957, t(2, 0.975) = 4.302653, sem 0.0206667
    s3 = summarize([0.522, 0.460, 0.522])
    assert s3.mean == pytest.approx(0.501333, abs=1e-6) and s3.std == pytest.approx(0.0357957, abs=1e-7)
    assert (s3.ci_low, s3.ci_high) == pytest.approx((0.501333 - 0.088922, 0.501333 + 0.088922), abs=2e-6)
    assert s3.ci_low < 0.460 and s3.ci_high > 0.522  # wider than [min, max], which covers 75 % at 3 seeds
    assert summarize([0.3]) == summarize([0.3]).__class__(1, 0.3, 0.0, None, None, None)
    assert (summarize([0.2, 0.2]).ci_low, summarize([0.2, 0.2]).ci_high) == (0.2, 0.2)
    y = np.random.default_rng(8).normal(0.5, 0.04, size=25)
    b = summarize(y)
    refb = sps.bootstrap((y,), np.mean, confidence_level=0.95, n_resamples=9999, method="BCa", random_state=0)
    assert b.method == "bca" and (b.ci_low, b.ci_high) == (refb.confidence_interval.low, refb.confidence_interval.high)


def test_paired_difference_is_the_paired_t_test():
    rng = np.random.default_rng(3)
    a = rng.normal(0.45, 0.03, size=6)
    b = a + rng.normal(0.05, 0.02, size=6)
    d = paired_difference(a, b)
    ref = sps.ttest_rel(b, a)
    t = ref.confidence_interval(0.95)
    assert d.mean == pytest.approx(float(np.mean(b - a)), abs=1e-15) and d.n == 6 and d.status == "tested"
    assert (d.t_low, d.t_high) == (pytest.approx(t.low, abs=1e-15), pytest.approx(t.high, abs=1e-15))
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-12) and d.p_holm == d.p_value
    assert d.significant == (ref.pvalue < 0.05) and d.verdict.startswith("significant (Holm p = ")
    with pytest.raises(ValueError, match="same length"):
        paired_difference([1.0, 2.0], [1.0])


def test_too_few_seeds_and_identical_differences_get_no_verdict():
    from statsmodels.stats.power import TTestPower

    d3 = paired_difference([0.40, 0.42, 0.41], [0.45, 0.49, 0.47])  # clearly positive, but 3 < 5 seeds
    assert d3.status == "too few seeds" and not d3.significant
    assert d3.power_1sd == pytest.approx(TTestPower().power(effect_size=1.0, nobs=3, alpha=0.05), abs=1e-9)
    assert d3.verdict == "too few seeds to test (3 < 5; power at a 1-sd effect: 0.18)"
    assert d3.t_low == pytest.approx(sps.ttest_rel([0.45, 0.49, 0.47], [0.40, 0.42, 0.41]).confidence_interval().low)
    d5 = paired_difference([0.40, 0.42, 0.41], [0.45, 0.49, 0.47], min_seeds=3)
    assert d5.status == "tested" and d5.significant
    for n, want in ((5, 0.40), (10, 0.80)):
        assert paired_difference(np.arange(n) * 0.1, np.arange(n) * 0.1 + np.arange(n) % 2 * 0.01).power_1sd == \
            pytest.approx(TTestPower().power(effect_size=1.0, nobs=n, alpha=0.05), abs=1e-9) == pytest.approx(want, abs=0.01)
    same = paired_difference([0.40, 0.50], [0.41, 0.51])  # +0.01, +0.01 (the sums round differently in binary)
    assert same.status == "identical differences" and not same.significant
    assert same.verdict == "cannot assess: identical differences"
    collapsed = paired_difference([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.3375, 0.4375, 0.5375, 0.6375, 0.7375, 0.8375])
    assert collapsed.verdict == "cannot assess: identical differences" and collapsed.mean == pytest.approx(0.2375)


def test_holm_equals_statsmodels_and_power_sizes_equal_statsmodels():
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.power import TTestPower

    p = [0.01, 0.04, 0.03, 0.2, 0.001]
    reject, corrected, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert holm(p) == pytest.approx(list(corrected), abs=1e-15)
    assert holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2, 0.005], abs=1e-15)  # by hand: x5, x4, x3, x2, x1, monotone
    diffs = apply_holm([paired_difference(*_pair(seed)) for seed in range(4)])
    raw = [paired_difference(*_pair(seed)).p_value for seed in range(4)]
    reject, corrected, _, _ = multipletests(raw, alpha=0.05, method="holm")
    assert [d.p_holm for d in diffs] == pytest.approx(list(corrected), rel=1e-12)
    assert [d.significant for d in diffs] == list(reject)
    for effect, sd in ((0.02, 0.025), (0.05, 0.03), (0.01, 0.04)):
        need = seeds_for_power(effect, sd)
        assert need == int(np.ceil(TTestPower().solve_power(effect_size=effect / sd, power=0.8, alpha=0.05)))
        assert power(effect / sd, need) >= 0.8 > power(effect / sd, need - 1)
    assert seeds_for_power(0.02, 0.025) == 15 and seeds_for_power(0.1, 0.0) == 2
    with pytest.raises(ValueError, match="non-zero"):
        seeds_for_power(0.0, 0.1)


def _pair(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(0.5, 0.05, size=6)
    return a, a + rng.normal(0.03 * seed, 0.02, size=6)


def test_item_bootstrap_resamples_seeds_and_items_together():
    rng = np.random.default_rng(0)
    a = (rng.random((4, 30)) < 0.4).astype(float)
    b = (rng.random((4, 30)) < 0.6).astype(float)
    low, high = item_bootstrap(b, a, n_resamples=500, random_state=5)
    # the same draws by hand: seed counts, then item counts; each resample's mean of (b - a) over the drawn cells
    g = np.random.default_rng(5)
    ws, wi = g.multinomial(4, [0.25] * 4, size=500), g.multinomial(30, [1 / 30] * 30, size=500)
    d = b - a
    means = [sum(ws[r, s] * wi[r, i] * d[s, i] for s in range(4) for i in range(30)) / 120 for r in range(500)]
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), abs=1e-12)
    assert low < (b - a).mean() < high
    # items add uncertainty: the seed-only interval of 4 seeds whose item scores are equal is narrower
    seed_only = item_bootstrap(np.repeat(d.mean(axis=1, keepdims=True), 30, axis=1), n_resamples=500, random_state=5)
    assert seed_only[1] - seed_only[0] < high - low
    with pytest.raises(ValueError, match="one shape"):
        item_bootstrap(b, a[:, :3])


def test_iqm_is_rliables_interquartile_mean_with_a_stratified_bootstrap():
    x = np.array([[0.1, 0.5], [0.2, 0.6], [0.3, 0.7], [0.9, 0.0]])  # 4 seeds x 2 benchmarks
    value, low, high = iqm(x, n_resamples=300, random_state=1)
    assert value == pytest.approx((0.2 + 0.3 + 0.5 + 0.6) / 4, abs=1e-15)  # by hand: the middle 4 of 8 scores
    g = np.random.default_rng(1)
    idx = [g.integers(0, 4, size=(300, 4)) for _ in range(2)]
    boot = [sps.trim_mean(np.concatenate([x[idx[0][r], 0], x[idx[1][r], 1]]), 0.25) for r in range(300)]
    assert (low, high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)


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
    assert (diff["t_low"], diff["t_high"], diff["verdict"]) == (ref.t_low, ref.t_high, ref.verdict)
    assert diff["verdict"] == "too few seeds to test (3 < 5; power at a 1-sd effect: 0.18)"
    assert diff["per_seed"] == pytest.approx([0.10, 0.11, 0.10])
    text = md.read_text()
    assert "| algorithm.name=d1 | sudoku | accuracy | 3 | 0.4200 | 0.0200 | [0.3703, 0.4697] (t) |" in text
    assert "| algorithm.name=tracerl - algorithm.name=d1 | sudoku | accuracy | 0, 1, 2 | +0.1033 |" in text
    assert "**too few seeds to test (3 < 5; power at a 1-sd effect: 0.18)**" in text
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
    assert (gain["t_low"], gain["t_high"], gain["p_value"]) == (ref.t_low, ref.t_high, ref.p_value)
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


def _run_items(d, seed, algo, correct: dict[str, np.ndarray]):
    """A run whose evaluation keeps per-item scores (``samples``), as ``dare run`` writes them."""
    (d / "eval").mkdir(parents=True)
    results = [{"name": bench, "n": len(c), "accuracy": float(c.mean()), "mean_reward": float(c.mean()), "nfe": 17,
                "tokens_per_second": 1.0,
                "samples": [{"index": i, "completion": "x", "reward": float(v), "correct": bool(v)} for i, v in enumerate(c)]}
               for bench, c in correct.items()]
    (d / "eval" / "after.json").write_text(json.dumps({"results": results}))
    spec = {"algorithm": {"name": algo, "params": {}}, "train": {"seed": seed, "max_steps": 2}, "eval": {"seed": seed},
            "output": {"dir": str(d), "overwrite": False}}
    (d / "run.json").write_text(json.dumps({"spec_hash": f"{algo}{seed}", "source": None, "spec": spec}))


def test_five_seeds_three_settings_holm_items_aggregate_power_and_plot(tmp_path):
    from statsmodels.stats.multitest import multipletests

    from dare.report.stats import item_bootstrap as boot
    from dare.sweep import power_lines

    rng = np.random.default_rng(11)
    rate = {"d1": 0.40, "spg": 0.45, "tracerl": 0.60}
    scores, entries = {}, []
    for algo, p in rate.items():
        for seed in range(5):
            c = {b: (rng.random(40) < p + off).astype(float) for b, off in (("sudoku", 0.0), ("countdown", -0.2))}
            scores[algo, seed] = c
            _run_items(tmp_path / f"{algo}-{seed}", seed, algo, c)
            entries.append(f"{algo}-{seed}={tmp_path / f'{algo}-{seed}'}")
    md, js, png = compare_runs(entries, tmp_path / "out", power_effect=0.02)
    data = json.loads(js.read_text())["grouped"]
    acc = [d for d in data["differences"] if d["metric"] == "accuracy"]
    assert len(acc) == 6 and all(d["status"] == "tested" for d in acc)  # 3 pairs x 2 benchmarks
    reject, corrected, _, _ = multipletests([d["p_value"] for d in acc], alpha=0.05, method="holm")
    assert [d["p_holm"] for d in acc] == pytest.approx(list(corrected), rel=1e-12)
    assert [d["significant"] for d in acc] == list(reject)
    tr = next(d for d in acc if d["b"] == "algorithm.name=tracerl" and d["a"] == "algorithm.name=d1" and d["benchmark"] == "sudoku")
    a = np.array([scores["d1", s]["sudoku"] for s in range(5)])
    b = np.array([scores["tracerl", s]["sudoku"] for s in range(5)])
    ref = sps.ttest_rel(b.mean(axis=1), a.mean(axis=1))
    assert tr["p_value"] == pytest.approx(ref.pvalue, rel=1e-12) and tr["mean"] == pytest.approx((b - a).mean(), abs=1e-12)
    assert (tr["item_low"], tr["item_high"]) == pytest.approx(boot(b, a), abs=1e-12)
    g = next(g for g in data["groups"] if g["label"] == "algorithm.name=d1")
    s = next(s for s in g["stats"] if s["metric"] == "accuracy" and s["benchmark"] == "sudoku")
    assert (s["item_low"], s["item_high"]) == pytest.approx(boot(a), abs=1e-12) and s["items"] == 40
    agg = next(x for x in data["aggregate"] if x["label"] == "algorithm.name=d1" and x["metric"] == "accuracy")
    both = np.array([[scores["d1", s][bench].mean() for bench in ("countdown", "sudoku")] for s in range(5)])
    assert agg["iqm"] == pytest.approx(sps.trim_mean(both, 0.25, axis=None), abs=1e-12)
    assert agg["ci_low"] <= agg["iqm"] <= agg["ci_high"]
    pw = data["power"]
    assert pw["effect"] == 0.02 and len(pw["rows"]) == 12
    assert all(r["seeds_needed"] == seeds_for_power(0.02, r["sd"]) for r in pw["rows"])
    text = md.read_text()
    assert "## Seeds for 80% power at a difference of 0.02" in text and "## Aggregate over benchmarks" in text
    assert "Holm p" in text and f"**{tr['verdict']}**" in text
    lines = power_lines(js)
    assert lines[0].startswith("seeds for 80% power at a difference of 0.02") and len(lines) == 13
    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert width == 14 * 110 and height <= 2 * 9 * 110


def test_gain_is_after_minus_before_in_any_order_and_the_plot_width_is_capped(tmp_path):
    from dare.report.groups import figure_size

    entries = []
    for seed, (before, after) in enumerate([(0.40, 0.50), (0.41, 0.49), (0.42, 0.55), (0.40, 0.52), (0.43, 0.50)]):
        d = tmp_path / f"s{seed}"
        _run(d, seed, "tracerl", after, after)
        (d / "eval" / "before.json").write_text(json.dumps({"results": [
            {"name": "sudoku", "n": 500, "accuracy": before, "mean_reward": before, "nfe": 17, "tokens_per_second": 1.0}]}))
        entries += [(f"s{seed}", d, "after"), (f"s{seed} (before)", d, "before")]  # after first
    _, js, _ = compare_runs(entries, tmp_path / "out")
    gain = next(d for d in json.loads(js.read_text())["grouped"]["differences"] if d["metric"] == "accuracy")
    assert gain["b"].endswith("(after)") and gain["a"].endswith("(before)")
    assert gain["mean"] == pytest.approx((0.10 + 0.08 + 0.13 + 0.12 + 0.07) / 5) and gain["significant"]
    many = {"groups": [{"label": f"g{i}", "stats": [{"metric": "accuracy"}]} for i in range(40)],
            "differences": [{"metric": "accuracy"}] * 200}
    assert figure_size(many) == (14.0, 9.0)  # 40 groups, 200 differences: no wider, no taller than 9 in per metric
    rng, entries = np.random.default_rng(4), []
    for k in range(8):  # 8 settings x 5 seeds: 28 pairs, the plot shows the 16 with the smallest Holm p
        for seed in range(5):
            acc = float(0.3 + 0.02 * k + rng.normal(0, 0.02))
            _run(tmp_path / f"g{k}-{seed}", seed, f"algo{k}", acc, acc)
            entries.append(f"g{k}-{seed}={tmp_path / f'g{k}-{seed}'}")
    _, js, png = compare_runs(entries, tmp_path / "many")
    diffs = [d for d in json.loads(js.read_text())["grouped"]["differences"] if d["metric"] == "accuracy"]
    assert len(diffs) == 28
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[:2] == (2 * 9 * 110, 14 * 110)


def test_compare_cli_takes_min_seeds_and_power(tmp_path):
    from click.testing import CliRunner

    from dare.cli import cli

    entries = []
    for algo, vals in {"d1": [0.40, 0.44, 0.42], "tracerl": [0.50, 0.55, 0.52]}.items():
        for seed, acc in enumerate(vals):
            _run(tmp_path / f"{algo}-{seed}", seed, algo, acc, acc)
            entries.append(f"{algo}-{seed}={tmp_path / f'{algo}-{seed}'}")
    res = CliRunner().invoke(cli, ["compare", *entries, "-o", str(tmp_path / "o"), "--min-seeds", "3", "--power", "0.02"])
    assert res.exit_code == 0, res.output
    d = paired_difference([0.40, 0.44, 0.42], [0.50, 0.55, 0.52], min_seeds=3)
    assert f"**{d.verdict}**" in res.output and d.status == "tested"
    assert f"| 3 | {d.std:.4f} | {seeds_for_power(0.02, d.std)} |" in res.output
    res = CliRunner().invoke(cli, ["compare", *entries, "-o", str(tmp_path / "o"), "--power", "0"])
    assert isinstance(res.exception, DareError) and "--power takes the difference to detect" in str(res.exception)
