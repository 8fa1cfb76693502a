"""The plugin's registration and the example spec."""

from __future__ import annotations

from dare.testing import repo_root


def test_entry_point_registers_the_family_and_sampler():
    from dare.plugins.manager import get_registry

    reg = get_registry()
    fam, sampler = reg.get("model_family", "dream"), reg.get("sampler", "dream")
    assert fam.distribution == sampler.distribution == "dare-plugin-dream"
    assert fam.cls.default_sampler == "dream" and sampler.cls.attention_kinds == ("full",)


def test_example_spec_validates(tmp_path):
    from dare.runspec import load_spec

    # output.dir in a temporary folder: the checkout's runs/dream-sft (a user's own run) must not decide the outcome
    spec = load_spec(repo_root() / "examples" / "dream-sft.yaml", overrides=[f"output.dir={tmp_path / 'run'}"])
    assert spec.model.new.family == "dream" and spec.sampler.name == "dream" and spec.algorithm.name == "sft"
