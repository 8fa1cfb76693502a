"""Sampled evaluation and RL rollouts do not depend on the batch split, for every family's sampler.

``generate_texts(..., seed=...)`` gives each prompt per-row generators keyed by its index
(:mod:`dare.randomness`) when the sampler supports them; these tests check that every first-party sampler
does, so an evaluation at temperature 1 (and RL rollouts, which key the same way) gives the same completions
at ``eval.batch_size`` 1 and 4. LLaDA and Dream decode with Fast-dLLM's dual cache + threshold, as
``sampler.params`` would ask for.
"""

from __future__ import annotations

import pytest

from dare.plugins.manager import get_registry
from dare.sampling import DecodingBundle
from dare.sampling.text import generate_texts
from dare.testing import tiny_model

SAMPLERS = {
    "llada": {"gen_length": 8, "block_length": 4, "steps": 8, "temperature": 1.0, "cache": "dual", "threshold": 0.9},
    "dream": {"gen_length": 8, "block_length": 4, "steps": 8, "alg": "maskgit_plus", "temperature": 1.0,
              "cache": "dual", "threshold": 0.9},
    "sdar": {"gen_length": 8, "block_length": 4, "denoising_steps": 2, "temperature": 1.0, "stop_at_eos": False},
    "llada2": {"gen_length": 8, "block_length": 4, "temperature": 1.0},
}
PROMPTS = ["1203", "40", "123456789", "7", "31", "0000120"]


@pytest.mark.parametrize("family", sorted(SAMPLERS))
def test_sampled_completions_are_the_same_at_batch_size_1_and_4(tmp_path, family):
    reg = get_registry()
    if family not in reg.entries["model_family"]:
        pytest.skip(f"family {family} is not installed")
    lm = tiny_model(family, tmp_path / family, seed=0)
    sampler = reg.get("sampler", family).cls(SAMPLERS[family])
    assert sampler.supports_row_generators

    def texts(batch_size, seed=0):
        return generate_texts(DecodingBundle.of(lm, sampler), PROMPTS, batch_size=batch_size, seed=seed).texts

    one = texts(1)
    assert texts(4) == one
    assert texts(4, seed=1) != one  # the completions are sampled, and keyed by the seed


def test_rollouts_in_chunks_of_rollout_batch_size_equal_one_call(tiny_llada_dir):
    """``algorithm.params.rollout_batch_size`` splits a rollout into sampler calls: each call gets the keyed
    generators of its own rows, so the completions and trajectories equal one call over all rows."""
    import torch

    from dare.modeling import load_model
    from dare.randomness import RowGenerators
    from dare.rl.rollout import sample_completions

    lm = load_model(tiny_llada_dir)
    sampler = get_registry().get("sampler", "llada").cls(SAMPLERS["llada"])

    def rollout(batch_size):
        gens = RowGenerators.keyed(0, "rollout", 3, range(2 * len(PROMPTS[:4])))
        batch, _ = sample_completions(DecodingBundle.of(lm, sampler), PROMPTS[:4], 2, generator=gens,
                                      batch_size=batch_size)
        return batch

    whole, chunked = rollout(None), rollout(3)
    assert torch.equal(whole.input_ids, chunked.input_ids)
    # the same step numbers (per block, not by the call's forward passes), so trajectory replay groups the same
    # tokens whatever the chunking or the process count
    assert torch.equal(whole.unmask_step, chunked.unmask_step)
    assert len({tuple(r.tolist()) for r in whole.input_ids}) > 4  # group members differ: the rows are sampled
