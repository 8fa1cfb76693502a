"""benchmarks/bench_decoding.py's pick of the fastest decoder that keeps vanilla's accuracy (within 1 pt)."""

from __future__ import annotations

import importlib.util

from dare.testing import repo_root


def _bench():
    spec = importlib.util.spec_from_file_location("bench_decoding", repo_root() / "benchmarks" / "bench_decoding.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _res(**decoders):
    return {"family": "llada", "decoders": {k: {"ratio": (r - 1, r, r + 1), "accuracy": a}
                                            for k, (r, a) in decoders.items()}}


def test_best_decoder_is_the_fastest_within_one_point_of_vanilla():
    bench = _bench()
    res = _res(vanilla=(1.0, 0.731), **{"dual + threshold 0.9": (27.4, 0.644), "threshold 0.99": (14.1, 0.731),
                                        "prefix + threshold 0.99": (17.2, 0.722), "dual cache": (5.1, 0.75)})
    name, ratio, change = bench.best_within(res)
    assert (name, ratio) == ("prefix + threshold 0.99", 17.2) and round(change, 6) == -0.9
    # exactly 1 pt below still counts; 1.1 pt does not
    assert bench.best_within(_res(vanilla=(1.0, 0.5), fast=(9.0, 0.49)))[0] == "fast"
    assert bench.best_within(_res(vanilla=(1.0, 0.5), fast=(9.0, 0.489))) == ("vanilla", 1.0, 0.0)


def test_the_table_has_the_factor_rule_and_keeps_dual_threshold_09():
    bench = _bench()
    names = bench.decoders(0.99, "dream")
    assert names["dual + threshold 0.9"] == {"cache": "dual", "threshold": 0.9}
    assert names["factor 1"] == {"factor": 1.0} and names["dual + factor 1"] == {"cache": "dual", "factor": 1.0}
    assert names["dual cache, first"]["refresh_commit"] == "first"
    assert "dual cache, first" not in bench.decoders(0.99, "llada")
