"""Masked-diffusion SFT: the loss equals a hand-computed value; collation follows the family convention."""

from __future__ import annotations

import math

import pytest

import torch

from dare.components import SpecialTokens
from dare.data.supervised import SupervisedCollator, SupervisedExample
from dare.diffusion import masked_diffusion_loss, sample_mask_ratio, token_logprobs

TOK = SpecialTokens(mask_id=9, eos_id=1, pad_id=2)


def test_masked_diffusion_loss_by_hand():
    # V = 3; example 0: response length 4, masked positions 1 and 3, t = 0.5
    logits = torch.zeros(2, 5, 3)
    logits[0, 1] = torch.tensor([2.0, 0.0, 0.0])  # target 0: CE = -log(e^2 / (e^2 + 2))
    logits[0, 3] = torch.tensor([0.0, 0.0, 0.0])  # target 2: CE = log 3
    targets = torch.tensor([[0, 0, 1, 2, 1], [1, 1, 1, 1, 1]])
    mask = torch.tensor([[False, True, False, True, False], [False, False, False, False, True]])
    t = torch.tensor([0.5, 0.25])
    length = torch.tensor([4, 2])
    loss, per = masked_diffusion_loss(logits, targets, mask, t, length)
    ce0 = -math.log(math.exp(2) / (math.exp(2) + 2)) + math.log(3)
    ce1 = math.log(3)
    assert math.isclose(per[0].item(), ce0 / 0.5 / 4, rel_tol=1e-6)  # divided by the response length, not the masked count
    assert math.isclose(per[1].item(), ce1 / 0.25 / 2, rel_tol=1e-6)
    assert math.isclose(loss.item(), (ce0 / 2 + ce1 / 0.5) / 2, rel_tol=1e-6)


def test_token_logprobs_only_where_needed():
    logits = torch.randn(2, 4, 5)
    targets = torch.randint(0, 5, (2, 4))
    where = torch.tensor([[True, False, True, False], [False, False, False, True]])
    full = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    got = token_logprobs(logits, targets, where)
    assert torch.allclose(got[where], full[where], atol=1e-6)
    assert (got[~where] == 0).all()


def test_mask_ratio_range():
    t = sample_mask_ratio(10000, eps=0.1, generator=torch.Generator().manual_seed(0))
    assert t.min() >= 0.1 and t.max() < 1.0
    assert abs(t.mean().item() - 0.55) < 0.01


def test_collator_llada_convention_eos_padding_is_response():
    c = SupervisedCollator(TOK, pad_in_response=True)
    b = c([SupervisedExample([5, 6], [7, 1]), SupervisedExample([5], [7, 8, 3, 1])])
    assert b["input_ids"].tolist() == [[5, 6, 7, 1, 1], [5, 7, 8, 3, 1]]
    assert b["attention_mask"].tolist() == [[1] * 5, [1] * 5]
    assert b["loss_mask"].tolist() == [[False, False, True, True, True], [False, True, True, True, True]]
    assert b["response_length"].tolist() == [3, 4]


def test_collator_block_convention_padding_excluded_and_whole_blocks():
    c = SupervisedCollator(TOK, pad_in_response=False, pad_to_multiple_of=4)
    b = c([SupervisedExample([5, 6], [7, 1]), SupervisedExample([5], [7, 8, 3, 1])])
    assert b["input_ids"].tolist() == [[5, 6, 7, 1, 2, 2, 2, 2], [5, 7, 8, 3, 1, 2, 2, 2]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]]
    assert b["response_length"].tolist() == [2, 4]


def test_sft_trainer_loss_replays_by_hand(tiny_llada_dir, tmp_path):
    """SFTTrainer.compute_loss = the paper's loss, each example's t and masks from its keyed generator."""
    from dare.modeling import load_model
    from dare.randomness import STREAMS, key_seed
    from dare.trainers import DareConfig
    from dare_sft.objective import SFT
    from dare_sft.trainer import SFTTrainer

    lm = load_model(tiny_llada_dir)
    c = SupervisedCollator(lm.tokens, lm.family.pad_in_response)
    batch = c([SupervisedExample([10, 11, 12], [20, 21, lm.tokens.eos_id], index=7),
               SupervisedExample([10], [22, lm.tokens.eos_id], index=3)])
    args = DareConfig(output_dir=str(tmp_path), report_to="none", seed=5)
    trainer = SFTTrainer(model=lm.model, args=args, train_dataset=[], data_collator=c, family=lm.family, tokens=lm.tokens,
                         objective=SFT(mask_eps=0.2))
    trainer.state.global_step = 4
    torch.manual_seed(123)
    got = trainer.compute_loss(lm.model, batch)
    state = torch.get_rng_state()
    # replay: example i's generator is keyed (seed 5, "sft", step 4, its dataset index)
    L = batch["input_ids"].shape[1]
    t, m = [], []
    for index in (7, 3):
        g = torch.Generator().manual_seed(key_seed(5, STREAMS["sft"], 4, index))
        t.append(0.8 * torch.rand(1, generator=g)[0] + 0.2)
        m.append(torch.rand(L, generator=g))
    t = torch.stack(t)
    m = (torch.stack(m) < t[:, None]) & batch["loss_mask"]
    noisy = torch.where(m, lm.tokens.mask_id, batch["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(noisy).logits.float(), -1).gather(-1, batch["input_ids"][..., None])[..., 0]
    per = [-(logp[b][m[b]].sum() / t[b]) / batch["response_length"][b] for b in range(2)]
    assert math.isclose(got.item(), (sum(per) / 2).item(), rel_tol=1e-5)
    torch.manual_seed(123)
    assert torch.equal(torch.get_rng_state(), state)  # the loss never drew from the global RNG


def test_blockwise_mask_by_hand():
    """One active block per row (clean prefix, masked loss positions inside it, hidden suffix), by hand."""
    from dare.diffusion import blockwise_mask
    from dare.randomness import RowGenerators

    # row 0: prompt 2, response 7 tokens -> blocks of 3: [2-4], [5-7], [8]; row 1: prompt 1, response 3: one block
    eligible = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    t = torch.tensor([0.5, 0.9])
    gens = RowGenerators.keyed(0, "sft", 0, [0, 1])
    masked, hidden, size = blockwise_mask(t, eligible, 3, generator=gens)
    # replay the draws: block index from one uniform, then L uniforms for the Bernoulli masks
    rows = []
    for r, n_blocks in ((0, 3), (1, 1)):
        g = RowGenerators.keyed(0, "sft", 0, [r]).generators[0]
        b = int(torch.rand(1, generator=g)[0] * n_blocks)
        rows.append((b, torch.rand(9, generator=g)))
    b0, u0 = rows[0]
    start = 2 + 3 * b0
    block = torch.zeros(9, dtype=torch.bool)
    block[start:min(start + 3, 9)] = True
    assert masked[0].tolist() == ((u0 < 0.5) & block).tolist()
    assert hidden[0].tolist() == [j >= start + 3 for j in range(9)]
    assert size.tolist() == [int(block.sum()), 3]
    assert rows[1][0] == 0 and not hidden[1].any()
    assert masked[1].tolist() == ((rows[1][1] < 0.9) & eligible[1]).tolist()
    # every block gets drawn: over many rows the active block index covers 0, 1, 2 evenly
    many = RowGenerators.keyed(1, "sft", 0, range(3000))
    m, h, s = blockwise_mask(torch.ones(3000), eligible[:1].expand(3000, -1), 3, generator=many)
    first = (m | h).float().argmax(dim=1)  # first corrupted position = the active block's start
    counts = torch.bincount(first, minlength=9)[[2, 5, 8]]
    assert counts.sum() == 3000 and counts.min() > 900
    assert ((m & h).sum() == 0) and bool((s == torch.where(first == 8, 1, 3)).all())


def test_blockwise_mask_draws_padding_blocks_with_their_weight():
    """padding_block_weight w: blocks made only of padding are drawn with weight w, content blocks with 1 (replayed
    by hand from the row's uniform); w = 1 is the uniform draw bit for bit."""
    from dare.diffusion import blockwise_mask
    from dare.randomness import RowGenerators

    # prompt 2, response 9 in blocks of 3: [c c P] [P P P] [P P P] (c content, P padding); weights 1, w, w
    eligible = torch.tensor([[0, 0] + [1] * 9], dtype=torch.bool)
    padding = torch.tensor([[0, 0, 0, 0] + [1] * 7], dtype=torch.bool)
    n, w = 3000, 0.25
    rows = eligible.expand(n, -1)
    gens = RowGenerators.keyed(4, "sft", 0, range(n))
    m, h, s = blockwise_mask(torch.ones(n), rows, 3, generator=gens, padding=padding.expand(n, -1),
                             padding_block_weight=w)
    first = (m | h).float().argmax(dim=1)
    drawn = torch.tensor([{2: 0, 5: 1, 8: 2}[int(f)] for f in first])
    u = torch.stack([torch.rand(1, generator=g)[0] for g in RowGenerators.keyed(4, "sft", 0, range(n)).generators])
    by_hand = torch.where(u * 1.5 < 1.0, 0, torch.where(u * 1.5 < 1.25, 1, 2))  # cumulative weights 1, 1.25, 1.5
    assert torch.equal(drawn, by_hand)
    share = torch.bincount(drawn, minlength=3).float() / n
    assert abs(share[0] - 2 / 3) < 0.03 and abs(share[1] - 1 / 6) < 0.03 and abs(share[2] - 1 / 6) < 0.03
    # a row whose blocks are all content ignores the weight; w = 1 reproduces the uniform draw
    plain = blockwise_mask(torch.ones(n), rows, 3, generator=RowGenerators.keyed(4, "sft", 0, range(n)))
    unit = blockwise_mask(torch.ones(n), rows, 3, generator=RowGenerators.keyed(4, "sft", 0, range(n)),
                          padding=padding.expand(n, -1), padding_block_weight=1.0)
    none_pad = blockwise_mask(torch.ones(n), rows, 3, generator=RowGenerators.keyed(4, "sft", 0, range(n)),
                              padding=torch.zeros_like(rows), padding_block_weight=w)
    for a, b in zip(plain, unit):
        assert torch.equal(a, b)
    for a, b in zip(plain, none_pad):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="padding_block_weight"):
        blockwise_mask(torch.ones(1), eligible, 3, padding=padding, padding_block_weight=0.0)
    # a tiny positive w (below float32's smallest) still draws the blocks of an all-padding row uniformly
    pad_rows = torch.ones(n, 6, dtype=torch.bool)
    m, h, s = blockwise_mask(torch.ones(n), pad_rows, 2, generator=RowGenerators.keyed(4, "sft", 0, range(n)),
                             padding=pad_rows, padding_block_weight=1e-50)
    counts = torch.bincount((m | h).float().argmax(dim=1), minlength=6)[[0, 2, 4]]
    assert counts.sum() == n and counts.min() > 900


def test_padding_block_weight_needs_block_length(tmp_path):
    """padding_block_weight without block_length names the field and the fix."""
    from dare.errors import SpecError
    from dare.runspec import validate_spec

    spec = {"model": {"new": {"family": "llada", "preset": "tiny"}},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "prompt_template": "{{ extra_info.puzzle }}",
                               "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
            "algorithm": {"name": "sft", "params": {"padding_block_weight": 0.1}},
            "train": {"max_steps": 1, "learning_rate": 1.0e-4}, "output": {"dir": str(tmp_path / "run")}}
    with pytest.raises(SpecError) as exc:
        validate_spec(spec)
    assert "algorithm.params.padding_block_weight" in str(exc.value) and "block_length" in str(exc.value)
    spec["algorithm"]["params"]["block_length"] = 4
    validate_spec(spec)


@pytest.mark.parametrize("weight", [1.0, 0.3])
def test_blockwise_sft_loss_replays_by_hand(tiny_llada_dir, tmp_path, weight):
    """With block_length, SFTTrainer's loss = CE/t over the active block's masked tokens / the block's tokens, the
    suffix masked in the input and never scored; with padding_block_weight, blocks of EOS only drawn with it."""
    from dare.modeling import load_model
    from dare.randomness import STREAMS, key_seed
    from dare.trainers import DareConfig
    from dare_sft.objective import SFT
    from dare_sft.trainer import SFTTrainer

    lm = load_model(tiny_llada_dir)
    eos = lm.tokens.eos_id
    c = SupervisedCollator(lm.tokens, lm.family.pad_in_response)
    batch = c([SupervisedExample([10, 11], [20, 21, 22, eos, eos, eos, eos, eos], index=2),
               SupervisedExample([10], [22, eos], index=5)])
    args = DareConfig(output_dir=str(tmp_path), report_to="none", seed=6)
    trainer = SFTTrainer(model=lm.model, args=args, train_dataset=[], data_collator=c, family=lm.family, tokens=lm.tokens,
                         objective=SFT(mask_eps=0.2, block_length=2, padding_block_weight=weight))
    trainer.state.global_step = 1
    got = trainer.compute_loss(lm.model, batch)
    ids, resp = batch["input_ids"], batch["loss_mask"]
    L = ids.shape[1]
    noisy, per = ids.clone(), []
    scored = []
    for row, index in enumerate((2, 5)):
        g = torch.Generator().manual_seed(key_seed(6, STREAMS["sft"], 1, index))
        t = 0.8 * torch.rand(1, generator=g)[0] + 0.2
        pos = resp[row].nonzero().flatten().tolist()
        blocks = [pos[i:i + 2] for i in range(0, len(pos), 2)]
        weights = [1.0 if any(int(ids[row, j]) != eos for j in blk) else weight for blk in blocks]
        total, u_block = sum(weights), torch.rand(1, generator=g)[0]
        # seed 6: row 2 draws block 1 with w = 0.3 where the uniform draw gives block 2
        b = int(u_block * len(blocks)) if weight == 1.0 else sum(sum(weights[:k + 1]) <= u_block * total
                                                                  for k in range(len(blocks)))
        u = torch.rand(L, generator=g)
        m = [j for j in blocks[b] if u[j] < t]
        for j in m + [j for blk in blocks[b + 1:] for j in blk]:
            noisy[row, j] = lm.tokens.mask_id
        scored.append((m, t, len(blocks[b])))
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(noisy).logits.float(), -1).gather(-1, ids[..., None])[..., 0]
    per = [-(logp[r, m].sum() / t) / n for r, (m, t, n) in enumerate(scored)]
    assert math.isclose(got.item(), (sum(per) / 2).item(), rel_tol=1e-5)


def test_blockwise_sft_refused_for_block_diffusion_families(tmp_path):
    """block_length names the field and the fix for SDAR/LLaDA2 (their blocks sit on an absolute grid)."""
    from dare.errors import SpecError
    from dare.runspec import validate_spec

    spec = {"model": {"new": {"family": "sdar", "preset": "tiny"}},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "prompt_template": "{{ extra_info.puzzle }}",
                               "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
            "algorithm": {"name": "sft", "params": {"block_length": 4}}, "train": {"max_steps": 1, "learning_rate": 1.0e-4},
            "output": {"dir": str(tmp_path / "run")}}
    with pytest.raises(SpecError) as exc:
        validate_spec(spec)
    assert "algorithm.params.block_length" in str(exc.value) and "Remove block_length" in str(exc.value)
    spec["algorithm"]["params"] = {}
    validate_spec(spec)  # the same spec without block_length is valid
