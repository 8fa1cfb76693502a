"""The `dare` lm-eval model in-process: registration without a user import, request handling."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lm_eval.api.instance import Instance



def test_registered_without_any_import(lm_eval_env):
    code = ("import sys; from lm_eval.api.registry import get_model; import lm_eval.models; "
            "assert 'dare' not in sys.modules and 'dare_lmeval.model' not in sys.modules, 'imported eagerly'; "
            "cls = get_model('dare'); print(cls.__module__, cls.__name__, get_model('hf').__name__)")
    out = subprocess.run([sys.executable, "-c", code], env=lm_eval_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["dare_lmeval.model", "DareLM", "HFLM"]


def test_startup_hook_stands_down_when_lm_eval_discovers_entry_points(monkeypatch):
    import lm_eval.api.registry as reg

    from dare_lmeval import _startup

    monkeypatch.setattr(reg, "load_plugins", lambda *a, **k: None, raising=False)
    assert _startup.register_entry_points() == []


@pytest.fixture(scope="module")
def lm(tiny_llada_dir):
    from dare_lmeval.model import DareLM

    return DareLM.create_from_arg_string(f"model={tiny_llada_dir},sampler=llada,block_length=8,steps=8,mc_samples=4",
                                         {"batch_size": 2, "device": "cuda:0", "max_batch_size": None})


def test_unknown_sampler_parameter_is_named(tiny_llada_dir):
    """lm-eval's ``--model_args`` string as the CLI hands it over (``create_from_arg_string``): a misspelt sampler
    parameter is refused by name, with the allowed ones listed (was a 45 s ``lm_eval run`` subprocess test)."""
    from dare.errors import DareError
    from dare_lmeval.model import DareLM

    with pytest.raises(DareError) as err:
        DareLM.create_from_arg_string(f"model={tiny_llada_dir},sampler=llada,block_length=17,temprature=0.5",
                                      {"batch_size": 1, "device": "cpu"})
    assert "unknown model argument 'temprature'" in str(err.value)
    assert "temperature" in str(err.value).split("temprature", 1)[1]  # the allowed sampler parameters are listed


def _req(kind, args, doc_id=0, idx=0):
    return Instance(request_type=kind, doc={}, arguments=args, idx=idx, metadata=("t", doc_id, 1))


def test_model_args_win_over_cli_and_missing_cuda_falls_back(tiny_llada_dir):
    from dare_lmeval.model import DareLM

    m = DareLM.create_from_arg_string(f"pretrained={tiny_llada_dir},batch_size=3,block_length=8,steps=8",
                                      {"batch_size": 1, "device": "cuda:0"})
    assert m.harness.batch_size == 3 and m.rank == 0 and m.world_size == 1
    import torch

    assert str(m.device) == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_generate_until_groups_by_kwargs_and_keeps_order(lm, caplog):
    reqs = [_req("generate_until", ("12", {"until": ["\n"], "max_gen_toks": 5, "do_sample": False})),
            _req("generate_until", ("34", {"until": ["\n"], "max_gen_toks": 5, "temperature": 0.0})),
            _req("generate_until", ("56", {"until": "x", "max_gen_toks": 9, "top_p": 0.9})),
            _req("generate_until", ("78", {"until": ["\n"], "max_gen_toks": 5}))]
    with caplog.at_level("WARNING", logger="dare_lmeval"):
        got = lm.generate_until(reqs)
    h = lm.harness
    assert got == [*h.generate(["12", "34"], ["\n"], 5), *h.generate(["56"], "x", 9), *h.generate(["78"], ["\n"], 5)]
    assert sum("generation kwargs ['top_p'] are ignored" in r.message for r in caplog.records) == 1


def test_loglikelihood_keys_are_document_and_choice(lm):
    a = _req("loglikelihood", ("ab", " cd"), doc_id=3, idx=1)
    b = _req("loglikelihood", ("ab", " cd"), doc_id=4, idx=0)
    first = lm.loglikelihood([a, b])
    assert lm.loglikelihood([b, a]) == first[::-1]  # order-independent
    assert first[0] != first[1]  # same text, other document: other draws
    assert first[0][0] == lm.harness.loglikelihood([("ab", " cd")], [(3, 1)])[0].logprob
    assert first[0][1] is False  # is_greedy off unless greedy_check=true


def test_loglikelihood_rolling_sums_window_elbos(lm):
    text = "0123456789" * 8  # 80 tokens: more than the tiny model's 64-token context, so two windows
    (total,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", (text,), doc_id=2)])
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    wins = [make_disjoint_window(w) for w in get_rolling_token_windows(ids, lm.harness.tokens.bos_id, 63, 1)]
    assert len(wins) == 2 and sum(len(c) for _, c in wins) == 80
    want = lm.harness.loglikelihood_tokens(wins, [(2, -1), (2, -2)])  # window keys: (doc_id, -1 - window)
    assert total == sum(e.logprob for e in want) and total < 0
