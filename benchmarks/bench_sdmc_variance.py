"""Spread and bias of sequence-ELBO estimators at an equal forward budget (GDPO's claim, arXiv 2510.08554 §3.1:
most of the double Monte-Carlo ELBO's variance comes from drawing the mask ratio t).

On a random tiny denoiser (:class:`tools.parity.common.TinyDenoiser`, vocabulary 16) and a fixed batch of
``--rows`` completions of ``--length`` tokens, each estimator is drawn ``--draws`` times (one generator per draw);
for every row this reports the standard deviation of the estimate over the draws and its mean minus a reference
(the stratified estimator with 1024 terms), both averaged over the rows, in nats:

* ``sdmc gauss-3`` (3 forwards: :class:`dare.diffusion.estimators.SDMCEstimator`) and ``sdmc gauss-2 x2`` (4);
* ``double MC`` (3 forwards: ``mc-elbo`` with ``scheme: bernoulli``, t ~ U[0, 1] then Bernoulli(t) masks);
* ``stratified counts`` (3 forwards: ``mc-elbo`` with ``scheme: stratified``, VRPO's).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sdmc_variance.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dare.diffusion.estimators import ScoringBatch, SDMCEstimator, StratifiedELBOEstimator, score_pass  # noqa: E402
from tools.parity.common import TinyDenoiser  # noqa: E402


def estimate(est, batch, fn, seed: int) -> torch.Tensor:
    passes = est.draw(batch, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return torch.stack([score_pass(fn, batch, p, 1.0).sequence for p in passes]).mean(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=24)
    ap.add_argument("--draws", type=int, default=200)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = TinyDenoiser().eval()
    P = 4
    ids = torch.randint(3, 15, (a.rows, P + a.length), generator=torch.Generator().manual_seed(1))
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(a.rows, a.length, dtype=torch.bool), P, 15)
    fn = lambda noisy, clean, att: model(noisy, attention_mask=att).logits  # noqa: E731
    t0 = time.perf_counter()
    ref = estimate(StratifiedELBOEstimator(mc_num=1024, scheme="stratified"), batch, fn, 12345)
    print(f"reference (stratified, 1024 terms): mean over rows {float(ref.mean()):.3f} nats "
          f"({time.perf_counter() - t0:.1f} s)")
    estimators = {
        "sdmc gauss-3 (3 fwd)": SDMCEstimator(quadrature="gauss-3", mc_samples=1),
        "sdmc gauss-2 x2 (4 fwd)": SDMCEstimator(quadrature="gauss-2", mc_samples=2),
        "double MC bernoulli (3 fwd)": StratifiedELBOEstimator(mc_num=3, scheme="bernoulli"),
        "stratified counts (3 fwd)": StratifiedELBOEstimator(mc_num=3, scheme="stratified"),
    }
    print("| estimator | std over draws (nats) | mean - reference (nats) |\n|---|---:|---:|")
    for name, est in estimators.items():
        vals = torch.stack([estimate(est, batch, fn, s) for s in range(a.draws)])  # [draws, rows]
        std = float(vals.std(0).mean())
        bias = float((vals.mean(0) - ref).mean())
        print(f"| {name} | {std:.3f} | {bias:+.3f} |")


if __name__ == "__main__":
    main()
