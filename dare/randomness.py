"""Per-example random streams: every random draw that belongs to an example is keyed by
``(seed, stream, step, example index)``.

A training step draws, for each example, its mask ratio and masks (SFT, DPO), its corruption passes
(RL), its rollout sampling noise. Drawing them from one generator per process makes them depend on how
the global batch is split (process count, per-device batch size, gradient accumulation): the same
example at the same step sees different noise on 1 and on 2 processes. Here each example gets its own
``torch.Generator`` seeded from a hash of ``(seed, stream, step, index)``, where ``index`` is the
example's global index (its position in the dataset; for RL completions, ``prompt index * group size
+ j``), so the draws are a function of the example alone. Consequences:

* 1 process and N processes, and any split of the same global batch into micro-batches, see the same
  noise, so their losses agree to float tolerance (docs/architecture.md, "Randomness");
* there is no generator state to checkpoint: a resumed run recomputes the same keys;
* nothing here touches torch's global RNG.

Draws must have per-row shapes that do not depend on the batch (e.g. ``[gen_length, V]``, not the
batch's padded prompt length): :meth:`RowGenerators.rand` draws ``shape`` for every row.

Streams (the ``stream`` argument, so different uses of the same example never share draws) are named in
:data:`STREAMS`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

__all__ = ["STREAMS", "key_seed", "RowGenerators", "row_generator", "rand", "rand_entries", "multinomial"]

#: Stream ids of the draws DARE makes per example.
STREAMS = {
    "sft": 1,  # SFT mask ratio t and Bernoulli masks
    "preference": 2,  # DPO/VRPO corruption passes
    "rollout": 3,  # RL rollout sampling (Gumbel noise, remasking, categorical draws)
    "rl-passes": 4,  # RL likelihood-estimator passes
    "eval": 5,  # evaluation sampling noise (temperature > 0)
    "preference-ref": 6,  # DPO reference-policy corruptions when not shared with the policy
    "likelihood": 7,  # evaluation log-likelihoods: MC-ELBO corruptions of a (context, continuation) request
}


def key_seed(*parts: int) -> int:
    """A 63-bit seed from integers: the first 8 bytes of BLAKE2b over their 8-byte encodings.

    :param parts: any ints (negative allowed, |x| < 2**63). :returns: an int in ``[0, 2**63)``.
    """
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(int(p).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little") & (2**63 - 1)


class RowGenerators:
    """One ``torch.Generator`` per batch row (the rows of one call: a batch, a micro-batch, a shard).

    Build them with :meth:`keyed`; pass them wherever DARE takes a ``generator`` (samplers, likelihood
    estimators, mask draws): every draw then takes ``shape`` values per row from that row's generator.
    """

    def __init__(self, generators: Sequence[torch.Generator]):
        self.generators = list(generators)

    @classmethod
    def keyed(cls, seed: int, stream: str | int, step: int, indices,
              device: str | torch.device = "cpu") -> RowGenerators:
        """Generators seeded by ``key_seed(seed, stream, step, index)`` for each ``index``.

        :param stream: a name of :data:`STREAMS` or an int. :param indices: ``[B]`` global example
            indices (a list or an int64 tensor). :param device: the generators' device (draws are made
            there and moved to the caller's device).
        :raises KeyError: an unknown stream name.
        """
        sid = STREAMS[stream] if isinstance(stream, str) else int(stream)
        idx = indices.tolist() if isinstance(indices, torch.Tensor) else list(indices)
        gens = [torch.Generator(device=device).manual_seed(key_seed(seed, sid, step, int(i))) for i in idx]
        return cls(gens)

    def __len__(self) -> int:
        return len(self.generators)

    @property
    def device(self) -> torch.device:
        return self.generators[0].device if self.generators else torch.device("cpu")

    def rows(self, index) -> RowGenerators:
        """The generators of rows ``index`` (a slice, a list/tensor of ints, or a bool mask)."""
        if isinstance(index, slice):
            return RowGenerators(self.generators[index])
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            index = index.nonzero().flatten()
        idx = index.tolist() if isinstance(index, torch.Tensor) else list(index)
        return RowGenerators([self.generators[i] for i in idx])

    def rand(self, shape: Sequence[int], device: str | torch.device | None = None, dtype=torch.float32) -> torch.Tensor:
        """``U[0, 1)`` of ``[B, *shape]``: row ``b`` from generator ``b``."""
        out = torch.empty((len(self.generators), *shape), dtype=dtype, device=self.device)
        for row, g in zip(out, self.generators):  # each row drawn in place (no stacked copy)
            torch.rand(tuple(shape), generator=g, dtype=dtype, device=g.device, out=row)
        return out.to(device) if device is not None else out


def row_generator(generator, row: int):
    """The generator row ``row`` draws its own values from: its generator with :class:`RowGenerators`, else
    ``generator`` itself (a shared ``torch.Generator`` or None)."""
    return generator.generators[row] if isinstance(generator, RowGenerators) else generator


def rand(shape: Sequence[int], generator: torch.Generator | RowGenerators | None, device=None) -> torch.Tensor:
    """``U[0, 1)`` float32 of ``shape`` drawn from ``generator`` on the generator's own device (so a CPU
    generator gives the same draws whatever the tensors' device), then moved to ``device``.

    With :class:`RowGenerators`, ``shape[0]`` must be the number of rows and each row draws ``shape[1:]``.

    :raises ValueError: row generators whose count differs from ``shape[0]``.
    """
    shape = tuple(shape)
    if isinstance(generator, RowGenerators):
        if len(generator) != shape[0]:
            raise ValueError(f"{len(generator)} row generators for a draw of {shape[0]} rows")
        return generator.rand(shape[1:], device=device)
    gen_device = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=gen_device).to(device)


def rand_entries(rows: torch.Tensor, generator: torch.Generator | RowGenerators | None, device=None) -> torch.Tensor:
    """``U[0, 1)`` float32, one per entry of ``rows`` ``[N]`` (int64, the batch row each entry belongs to, e.g.
    the row of each masked position): from ``generator`` in one draw, or with :class:`RowGenerators` entry ``i``
    from generator ``rows[i]`` (each row's values in entry order, so a row's draws do not depend on the others).
    """
    if not isinstance(generator, RowGenerators):
        return torch.rand(rows.shape, device=device, generator=generator)
    out = torch.empty(rows.shape, dtype=torch.float32)
    rows = rows.cpu()
    for r in rows.unique().tolist():
        at = rows == r
        g = generator.generators[r]
        out[at] = torch.rand((int(at.sum()),), generator=g, device=g.device).cpu()
    return out.to(device)


def multinomial(probs: torch.Tensor, num_samples: int, generator: torch.Generator | RowGenerators | None,
                replacement: bool = False, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.multinomial(probs, num_samples)`` with per-row generators.

    :param probs: ``[N, K]`` non-negative weights. :param rows: with :class:`RowGenerators`, ``[N]`` the
        generator row of each of ``probs``' rows (default: ``arange(N)``).
    :returns: ``[N, num_samples]`` int64.
    """
    if not isinstance(generator, RowGenerators):
        return torch.multinomial(probs, num_samples, replacement, generator=generator)
    rows = torch.arange(probs.shape[0]) if rows is None else rows
    out = [torch.multinomial(probs[i : i + 1].to(generator.generators[r].device), num_samples, replacement,
                             generator=generator.generators[r]) for i, r in enumerate(rows.tolist())]
    if not out:
        return torch.empty(0, num_samples, dtype=torch.long, device=probs.device)
    return torch.cat(out).to(probs.device)
