"""Helpers shared by the Dream plugin tests."""

#: docs/model-families.md §2.5 with DARE-independent special ids (mask 250, pad/bos/eos 1).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, max_position_embeddings=128, rope_theta=1e6, rms_norm_eps=1e-6, mask_token_id=250,
            pad_token_id=1, bos_token_id=1, eos_token_id=1, tie_word_embeddings=False)


def perturbed_tiny_model(seed: int = 0, **overrides):
    """A tiny ``DreamModel`` in eval mode whose every tensor (norms, biases, padding row) is random."""
    import torch

    from dare_dream import DreamConfig, DreamModel

    torch.manual_seed(seed)
    model = DreamModel(DreamConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model
