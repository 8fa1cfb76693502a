"""What ``dare compare``'s statistics claim, checked by simulation (:mod:`dare.report.stats`).

For each seed count n, ``--sims`` simulated comparisons draw per-seed scores from a normal distribution
(``numpy.random.default_rng(seed)``):

* **coverage**: how often the 95 % interval of a group's mean (:func:`dare.report.stats.summarize`: the t-interval)
  holds the true mean, next to the percentile bootstrap over seeds it replaced (the interval of :func:`scipy.stats.
  bootstrap`, ``method="percentile"``; ``--boot-sims`` of the simulations, it is slow);
* **false positives**: how often the verdict (:func:`dare.report.stats.paired_difference`, ``min_seeds=2`` so every n
  gets a verdict) calls two equal settings significant (nominal 5 %);
* **power**: how often it calls a difference of one standard deviation of the per-seed differences significant,
  next to the noncentral-t power :func:`dare.report.stats.power` the output prints;
* **too few seeds**: the verdict with the default ``min_seeds`` (5), as printed.

Run: ``python benchmarks/sim_compare_stats.py [--sims 4000] [--seeds 3,5,10]``; it prints one markdown table.
"""

from __future__ import annotations

import argparse

import numpy as np


def main(argv: list[str] | None = None) -> None:
    from scipy import stats as sps

    from dare.report.stats import paired_difference, power, summarize

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000, help="simulated comparisons per seed count")
    ap.add_argument("--boot-sims", type=int, default=400, help="of them, how many also get the percentile bootstrap")
    ap.add_argument("--seeds", default="3,5,10", help="seed counts, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print("| seeds | t-interval coverage | percentile-bootstrap coverage | false positives (equal settings) | "
          "power at 1 sd (simulated) | power at 1 sd (printed) | default verdict, 1 sd |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n in [int(s) for s in args.seeds.split(",")]:
        rng = np.random.default_rng([args.seed, n])
        groups = rng.normal(0.5, 0.05, size=(args.sims, n))
        cover = np.mean([(s.ci_low <= 0.5 <= s.ci_high) for s in map(summarize, groups)])
        boot = [sps.bootstrap((g,), np.mean, n_resamples=999, method="percentile", random_state=0).confidence_interval
                for g in groups[: args.boot_sims]]
        boot_cover = np.mean([b.low <= 0.5 <= b.high for b in boot])
        base = rng.normal(0.5, 0.05, size=(args.sims, n))
        same = [paired_difference(a, a + rng.normal(0, 0.02, size=n), min_seeds=2).significant for a in base]
        shifted = [paired_difference(a, a + rng.normal(0.02, 0.02, size=n), min_seeds=2).significant for a in base]
        verdict = paired_difference(base[0], base[0] + rng.normal(0.02, 0.02, size=n)).verdict
        verdict = verdict if "too few" in verdict else "a verdict"
        print(f"| {n} | {cover:.3f} | {boot_cover:.3f} | {np.mean(same):.3f} | {np.mean(shifted):.3f} | "
              f"{power(1.0, n):.3f} | {verdict} |")


if __name__ == "__main__":
    main()
