"""``dare new-plugin``: render ``dare/templates/plugin`` into an installable plugin package.

The package has a ``pyproject.toml`` with the ``dare`` entry point, one module with the chosen
component (a pydantic ``Params`` model included; its class holds the name and description), ``plugin.py``
registering it lazily by its ``"module:Class"`` path alone (see :mod:`dare.plugins.hookspecs`), a README and tests
that pass on day one. ``pip install -e <dir>`` makes the component appear in ``dare plugins`` and
usable from a spec. The templates live in ``dare/templates/plugin``, so they ship with the package.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from dare.errors import DareError

__all__ = ["render_plugin", "KINDS", "names_for"]

#: CLI kind -> (registry kind, hook, module name, label)
KINDS = {
    "objective": ("objective", "register_objectives", "objective", "objective"),
    "rl-objective": ("objective", "register_objectives", "objective", "online-RL objective"),
    "model": ("model_family", "register_model_families", "family", "model family"),
    "sampler": ("sampler", "register_samplers", "sampler", "sampler"),
    "evaluator": ("evaluator", "register_evaluators", "evaluator", "evaluator (benchmark)"),
    "reward": ("reward", "register_rewards", "reward", "reward"),
}

_TEMPLATE_FOR = {"objective": "objective", "rl-objective": "rl_objective", "model": "model", "sampler": "sampler",
                 "evaluator": "evaluator", "reward": "reward"}

_EXTRA_TESTS = {
    "reward": '''

def test_{module}_scores_the_last_line():
    reset()
    reward = get_registry().get("reward", "{component}").create()
    sample = {{"reward_model": {{"ground_truth": "42"}}}}
    assert reward.score("reasoning...\\n42", sample) == 1.0
    assert reward.score("reasoning...\\n41", sample) == 0.0
''',
    "evaluator": '''

def test_{module}_counts_full_reward_as_correct():
    reset()
    ev = get_registry().get("evaluator", "{component}").create()
    assert ev.is_correct(1.0) and not ev.is_correct(0.5)
    assert get_registry().find("reward", ev.reward) is not None
''',
    "objective": '''

def test_{module}_loss_matches_hand_computation():
    import math

    import torch

    from {module}.objective import loss

    # one example, 3 response tokens, 2 masked at t = 0.5, uniform logits over 4 tokens
    logits = torch.zeros(1, 3, 4)
    targets = torch.tensor([[1, 2, 3]])
    masked = torch.tensor([[True, False, True]])
    value = loss(logits, targets, masked, torch.tensor([0.5]), torch.tensor([3]), weight=2.0)
    assert math.isclose(float(value), 2.0 * (2 * math.log(4) / 0.5) / 3, rel_tol=1e-6)
''',
    "rl-objective": '''

def test_{module}_loss_matches_hand_computation():
    import torch

    from dare.diffusion.estimators import PassScore
    from dare.rl import PassLossInput

    obj = get_registry().get("objective", "{component}").create({{"scale": 2.0}})
    # one row, advantage +1, two scored tokens at ratio 1 (old = current): token-mean of -A * rho = -1
    cur = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    inp = PassLossInput(current=PassScore(cur, torch.ones(1, 2, dtype=torch.bool)), old=cur.detach(), ref=None,
                        advantages=torch.tensor([1.0]), response_lengths=torch.tensor([2]), pass_index=0, num_passes=1,
                        num_tokens=2.0, num_sequences=1, total_response_tokens=2.0)
    terms = obj.pass_loss(inp)
    assert abs(terms.loss.item() - 2.0 * -1.0) < 1e-6
    terms.loss.backward()
    assert torch.allclose(cur.grad, torch.tensor([[-1.0, -1.0]]))  # 2.0 x d(-rho/2)/dl at rho = 1


def test_{module}_trains_two_rl_steps_from_a_spec(tmp_path):
    """Two RL steps on a tiny random LLaDA model (DARE's byte tokenizer) with the packaged Sudoku rows: the rollout,
    rewards, advantages and this loss run end to end, and the trained model is saved."""
    import json

    from dare.run import Run
    from dare.runspec import validate_spec
    from dare.testing import tiny_model

    reset()
    if get_registry().find("model_family", "llada") is None:
        pytest.skip("needs the llada model family (install its plugin)")
    tiny_model("llada", tmp_path / "model", seed=0)
    spec = {{
        "model": {{"path": str(tmp_path / "model")}},
        "data": {{"train": {{"path": "dare://sudoku/train.parquet", "limit": 4, "chat_template": False,
                           "prompt_template": "{{{{ extra_info.puzzle }}}}"}}}},
        "algorithm": {{"name": "{component}", "params": {{"group_size": 2, "scale": 1.0,
                                                     "rollout_sampler": {{"temperature": 1.0}}}}}},
        "sampler": {{"name": "llada", "params": {{"gen_length": 4, "block_length": 4, "steps": 2}}}},
        "rewards": [{{"name": "sudoku", "params": {{"require_answer_tags": False}}}}],
        "train": {{"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 2, "logging_steps": 1,
                   "save_steps": 2, "num_threads": 1}},
        "output": {{"dir": str(tmp_path / "run")}},
    }}
    run = Run(validate_spec(spec))
    out = run.execute(train=True, evaluate=False)
    assert out["train"]["global_step"] == 2
    logged = [json.loads(line) for line in run.rundir.metrics.read_text().splitlines()]
    assert [r["step"] for r in logged if "reward" in r] == [1, 2]
    assert all(0.0 <= r["reward"] <= 1.0 for r in logged if "reward" in r)
    assert run.rundir.has_model()  # model/ with its config.json
''',
    "sampler": '''

def test_{module}_decodes_left_to_right():
    import torch

    from dare.components import ModelFamily, SpecialTokens
    from dare.testing import LogitsStub

    class Fam(ModelFamily):
        name = "stub"

        def logits(self, model, ids, attention_mask=None):
            return model(ids).logits

    V = 8
    model = LogitsStub(lambda ids: torch.nn.functional.one_hot((ids + 1) % V, V).float())
    sampler = get_registry().get("sampler", "{component}").create({{"gen_length": 3}})
    tokens = SpecialTokens(mask_id=7, eos_id=0, pad_id=0)
    out = sampler.generate(model, Fam(), tokens, torch.tensor([[3]]))
    assert out.sequences.tolist() == [[3, 0, 0, 0]]
    assert out.unmask_step.tolist() == [[0, 1, 2]] and out.nfe == 3
''',
    "model": '''

def test_{module}_declares_its_facts():
    reset()
    fam = get_registry().get("model_family", "{component}").create()
    assert fam.attention in ("full", "block")
    assert "mask" in fam.special_token_strings
''',
}


def names_for(name: str) -> dict[str, str]:
    """Derive every name from one answer: ``my-reward`` -> dist ``dare-plugin-my-reward``,
    module ``dare_plugin_my_reward``, component ``my-reward``, class ``MyReward``.

    :raises DareError: a name that is not lowercase letters, digits and hyphens/underscores.
    """
    base = name.strip().lower().replace("_", "-")
    base = base[len("dare-plugin-") :] if base.startswith("dare-plugin-") else base
    if not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", base or ""):
        raise DareError(f"plugin name {name!r}: use lowercase letters, digits and hyphens, starting with a letter "
                        "(e.g. my-reward)")
    dist = f"dare-plugin-{base}"
    return {
        "dist": dist,
        "module": dist.replace("-", "_"),
        "component": base,
        "entry_name": base,
        "class_name": "".join(p.capitalize() for p in base.split("-")),
    }


def _templates_dir() -> Path:
    cand = Path(__file__).resolve().parents[1] / "templates" / "plugin"
    if cand.is_dir():
        return cand
    raise DareError("the plugin templates are missing from this installation (dare/templates/plugin)")


def _refuse_installed(name: str, n: dict[str, str], reg_kind: str, label: str) -> None:
    """Refuse a name whose distribution is installed (``pip install -e`` would replace it) or whose
    component name an installed plugin already registers for this kind.

    :raises DareError: naming the installed distribution and suggesting another name.
    """
    from importlib import metadata

    from dare.plugins.manager import get_registry

    suggest = f"choose another name, e.g. my-{n['component']}"
    try:
        dist = metadata.distribution(n["dist"])
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        raise DareError(f"plugin name {name!r}: the distribution {n['dist']} ({dist.version}) is already installed, "
                        f"and installing the new package would replace it; {suggest}")
    entry = get_registry().find(reg_kind, n["component"])
    if entry is not None:
        raise DareError(f"plugin name {name!r}: an installed {label} is already called {entry.name!r} (from "
                        f"{entry.distribution}); the two would clash; {suggest}")


def render_plugin(name: str, kind: str, parent: Path) -> Path:
    """Write the package to ``parent/<dist>`` atomically and return its path.

    :raises DareError: unknown kind, bad name, or the target directory already exists.
    """
    from dare.io import atomic_dir

    if kind not in KINDS:
        raise DareError(f"--kind {kind!r}: use one of {', '.join(KINDS)}")
    n = names_for(name)
    reg_kind, hook, kind_module, label = KINDS[kind]
    target = Path(parent) / n["dist"]
    if target.exists():
        raise DareError(f"{target} already exists; choose another name or directory")
    _refuse_installed(name, n, reg_kind, label)
    spec_snippet = {
        "objective": f"algorithm: {{name: {n['component']}, params: {{weight: 1.0}}}}",
        # a whole spec that validates once the plugin is installed (the llada family and the packaged Sudoku rows)
        "rl-objective": "\n".join([
            "model: {new: {family: llada, preset: tiny, tokenizer: byte, seed: 0}}",
            "data:",
            "  train: {path: dare://sudoku/train.parquet, limit: 64, chat_template: false,",
            "          prompt_template: \"{{ extra_info.puzzle }}\"}",
            f"algorithm: {{name: {n['component']}, params: {{group_size: 8, scale: 1.0,",
            "                                rollout_sampler: {temperature: 1.0}}}",
            "sampler: {name: llada, params: {gen_length: 17, block_length: 17, steps: 17}}",
            "rewards: [{name: sudoku, params: {require_answer_tags: false}}]",
            "train: {learning_rate: 1.0e-4, max_steps: 10, per_device_batch_size: 4}",
            f"output: {{dir: runs/{n['component']}}}"]),
        "model": f"model: {{path: <a {n['component']} checkpoint>}}",
        "sampler": f"sampler: {{name: {n['component']}, params: {{gen_length: 16}}}}",
        "evaluator": f"eval: {{benchmarks: [{{name: {n['component']}, path: data/test.parquet}}]}}",
        "reward": f"rewards: [{{name: {n['component']}}}]",
    }[kind]
    ctx = dict(n, kind=reg_kind, kind_label=label, kind_module=kind_module, hook=hook,
               description=f"a {label} for DARE", spec_snippet=spec_snippet,
               extra_test=_EXTRA_TESTS[kind].format(module=n["module"], component=n["component"]))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_templates_dir())), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    files = {
        "pyproject.toml": "pyproject.toml.j2",
        "README.md": "README.md.j2",
        f"src/{n['module']}/__init__.py": "init.py.j2",
        f"src/{n['module']}/plugin.py": "plugin.py.j2",
        f"src/{n['module']}/{kind_module}.py": f"{_TEMPLATE_FOR[kind]}.py.j2",
        f"tests/test_{n['module']}.py": "test.py.j2",
    }
    with atomic_dir(target) as tmp:
        for rel, tmpl in files.items():
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(env.get_template(tmpl).render(**ctx))
    return target
