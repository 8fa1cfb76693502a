"""Block decoding pieces of the core: the canvas layout and its masks, the block-family base's decoder check, and
one KV-cache interface that both block samplers drive for both block families."""

from __future__ import annotations

import pytest
import torch

from dare.modeling import BlockDiffusionFamily, block_decoder_problem
from dare.sampling import block_canvas, left_padding_problem
from dare.testing import tiny_model

M, P = 99, 98  # mask and shift-slot fill


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models are dominated by per-op overhead; one thread is faster and steadier on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_canvas_aligns_the_first_decoded_block_of_every_row():
    """The module docstring's example: block 4, prompts of 6 and 2 tokens, gen_length 4."""
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 7, 8]])
    attn = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    c = block_canvas(ids, attn, gen_length=4, block_length=4, mask_id=M, pad_id=P)
    assert c.x.tolist() == [[1, 2, 3, 4, 5, 6, M, M, M, M, M, M], [P, P, P, P, 7, 8, M, M, M, M, M, M]]
    assert c.position_ids.tolist() == [list(range(12)), [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]]
    assert c.valid.tolist() == [[True] * 12, [False] * 4 + [True] * 8]
    assert (c.offset.tolist(), c.gen_start.tolist(), c.row_blocks.tolist()) == ([0, 4], [6, 6], [3, 3])
    assert (c.first_block, c.num_blocks, c.padded) == (1, 3, True)
    assert c.completion_index(4, 4).tolist() == [[-2, -1, 0, 1], [-2, -1, 0, 1]]
    c.x[:, 6:10] = torch.tensor([[20, 21, 22, 23], [30, 31, 32, 33]])
    assert c.completions(4).tolist() == [[20, 21, 22, 23], [30, 31, 32, 33]]
    # without a mask: no shift, the shift fill is never used
    c = block_canvas(ids[:1], None, gen_length=4, block_length=4, mask_id=M, pad_id=P)
    assert (c.offset.tolist(), c.first_block, c.num_blocks, c.padded) == ([0], 1, 3, False)


def test_canvas_masks_hide_the_shift():
    ids, attn = torch.tensor([[5, 6, 7], [0, 0, 8]]), torch.tensor([[1, 1, 1], [0, 0, 1]])
    c = block_canvas(ids, attn, gen_length=1, block_length=2, mask_id=M)
    # row 0: [5 6 | 7 m], row 1: [s s | 8 m] (s: shift slot, x = mask id)
    assert c.x.tolist() == [[5, 6, 7, M], [M, M, 8, M]]
    full = c.prefix_mask(4)
    assert full.shape == (2, 1, 4, 4)
    assert full[0, 0].int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]  # block-causal
    assert full[1, 0].int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]  # shift: itself only
    assert torch.equal(c.prefix_mask(2), full[..., :2, :2])
    assert c.key_mask(4).int().tolist() == [[[[1, 1, 1, 1]]], [[[0, 0, 1, 1]]]]
    unpadded = block_canvas(ids[:1], None, gen_length=1, block_length=2, mask_id=M)
    assert unpadded.key_mask(4) is None and unpadded.prefix_mask(4).shape == (1, 1, 4, 4)


def test_left_padding_problems_are_named():
    ids = torch.zeros(2, 3, dtype=torch.long)
    assert left_padding_problem(ids, None) is None
    assert left_padding_problem(ids, torch.tensor([[0, 1, 1], [1, 1, 1]])) is None
    assert "left padding" in left_padding_problem(ids, torch.tensor([[1, 0, 1], [1, 1, 1]]))
    assert "left padding" in left_padding_problem(ids, torch.tensor([[0, 2, 1], [1, 1, 1]]))
    assert "must match" in left_padding_problem(ids, torch.ones(2, 4))


def test_block_decoders_need_a_block_family_with_the_kv_cache_interface():
    class NoCache(BlockDiffusionFamily):
        name = "no-cache"
        default_sampler = "mine"
        default_block_size = 4

    fam = NoCache()
    problem = block_decoder_problem(fam, "sdar")
    assert "needs a block-diffusion family with a KV-cached block forward" in problem and "'mine'" in problem
    assert fam.block_size({}) == 4 and fam.block_size({"block_size": 8}) == 8
    assert (fam.attention, fam.pad_in_response) == ("block", False)
    with pytest.raises(NotImplementedError):
        fam.new_cache(None)
    llada = pytest.importorskip("dare_llada.family")
    assert "'llada'" in block_decoder_problem(llada.LLaDAFamily(), "sdar")


@pytest.fixture(scope="module")
def block_models(tmp_path_factory):
    """Tiny SDAR and LLaDA2 models (fp32, block size 4) with their families."""
    pytest.importorskip("dare_sdar")
    pytest.importorskip("dare_llada2")
    from dare_llada2.family import LLaDA2Family
    from dare_sdar.family import SDARFamily

    sdar = tiny_model("sdar", tmp_path_factory.mktemp("sdar"), seed=3, initializer_range=0.2)
    llada2 = tiny_model("llada2", tmp_path_factory.mktemp("llada2"), seed=0, initializer_range=0.2, block_size=4)
    return {"sdar": (SDARFamily(), sdar), "llada2": (LLaDA2Family(), llada2)}


@pytest.mark.parametrize("family_name", ["sdar", "llada2"])
@pytest.mark.parametrize("sampler_name, params", [
    ("sdar", {"gen_length": 8, "block_length": 4, "denoising_steps": 2, "confidence_threshold": 0.05}),
    ("llada2", {"gen_length": 8, "block_length": 4, "steps": 2, "threshold": 0.3}),
])
def test_each_block_sampler_decodes_each_block_family_through_one_cache_interface(block_models, family_name,
                                                                                   sampler_name, params):
    """The KV-cached path equals the recomputing one, and each row of a left-padded batch equals the row alone, for
    every (sampler, family) pair: both samplers only use the family's new_cache/block_logits."""
    from dare.plugins.manager import get_registry

    family, lm = block_models[family_name]
    model, t = lm.model.eval(), lm.tokens
    sampler_cls = get_registry().get("sampler", sampler_name).cls
    rows = [torch.randint(10, 200, (n,), generator=torch.Generator().manual_seed(n)) for n in (3, 6, 9)]
    width = max(len(r) for r in rows)
    ids = torch.stack([torch.cat([torch.full((width - len(r),), t.pad_id), r]) for r in rows])
    attn = (torch.arange(width)[None] >= torch.tensor([width - len(r) for r in rows])[:, None]).long()
    cached = sampler_cls({**params, "use_cache": True}).generate(model, family, t, ids, attn)
    recomputed = sampler_cls({**params, "use_cache": False}).generate(model, family, t, ids, attn)
    assert torch.equal(cached.sequences, recomputed.sequences) and torch.equal(cached.unmask_step, recomputed.unmask_step)
    for i, r in enumerate(rows):
        alone = sampler_cls(params).generate(model, family, t, r[None])
        assert torch.equal(alone.completions[0], cached.completions[i])
    assert len(set(cached.completions.flatten().tolist())) > 3  # not a degenerate answer
