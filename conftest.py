"""Fixtures for every test of the repository (core and plugins).

Each test runs in its own empty working directory, so a relative path in a spec or a command
(``runs/...``, ``./schemas``) never reads or writes the checkout: a user's own ``runs/`` (from
``dare run examples/...``) cannot change a test's outcome, and no test leaves files in the repository.
Tests address repository files through ``dare.testing.repo_root()``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


# --------------------------------------------------------------------------- test tiers
#: Every test has one kind (a marker registered in pyproject.toml), decided here and nowhere else:
#: ``process`` starts other processes that do real work (torchrun, the code sandbox, pip, lm-eval, `dare`
#: in a subprocess), ``train`` trains a model for steps (a `dare run`/`dare train`, a trainer, an RL step),
#: ``unit`` is the rest. `make test-fast` runs ``-m unit`` in parallel; `make test` runs every kind.
#: A file's kind applies to each of its tests unless TEST_KIND names the test (``file::function``, or
#: ``file::function[params]`` for one parametrization). Files are named without their folder (test file names
#: are unique in the repository), so a test file that moves into a plugin keeps its kind.
FILE_KIND: dict[str, str] = {
    # other processes
    "test_distributed.py": "process",
    "test_sharding.py": "process",
    "test_resume.py": "process",
    "test_scaffold.py": "process",
    "test_sandbox_corpus.py": "process",
    "test_rewards_code.py": "process",
    "test_kernel_layers.py": "process",     # the code plugin's kernel-layer checks
    "test_task_helpers.py": "process",      # the code plugin: HumanEval/38 and /50 in the sandbox
    "test_remote_backend.py": "process",    # the code plugin's remote backend against a local stub service
    "test_lmeval_acceptance.py": "process",
    "test_lmeval_model.py": "process",
    "test_hostile_inputs.py": "process",    # the real `dare` in subprocesses: SIGTERM, locks, disk full
    "test_device_check.py": "process",      # benchmarks/device_check.sh end to end (dry mode on a CPU)
    # training runs
    "test_dpo_train.py": "train",
    "test_examples.py": "train",
    "test_finished_run.py": "train",
    "test_gpu.py": "train",
    "test_gradient_checkpointing.py": "train",
    "test_guards.py": "train",
    "test_keep_best.py": "train",
    "test_lora.py": "train",
    "test_precision.py": "train",
    "test_profile.py": "train",
    "test_run.py": "train",
    "test_run_dir.py": "train",
    "test_grpo_dtreerpo.py": "train",
    "test_grpo_ebpo.py": "train",
    "test_grpo_justgrpo.py": "train",
    "test_grpo_mdpo.py": "train",
    "test_grpo_smoke_extra.py": "train",
    "test_grpo_spg.py": "train",
    "test_tracerl_memory.py": "train",      # TraceRL's update under an activation budget against every row at once
    "test_smoke.py": "train",
    "test_trainer.py": "train",
    "test_sdar_training.py": "train",
    "test_diffusiongemma_run.py": "train",  # `dare run` of a tiny DiffusionGemma spec: SFT steps, evaluation
    "test_diffusiongemma_rl.py": "train",   # `dare run` of d1 and TraceRL on a tiny DiffusionGemma, evaluation
    "test_pipeline.py": "train",            # `dare run` through the CLI, stage by stage
    "test_trackers.py": "train",            # train.report_to: wandb, trackio, MLflow offline, read back
    "test_recipes.py": "train",             # the real 7-16B configs on the meta device; 2 training steps per recipe
    "test_documented_commands.py": "train",  # every command of README.md, docs/ and --help: validated; a few steps
}
TEST_KIND: dict[str, str] = {
    # a reward that never returns ends a fresh Python with the watchdog's paragraph
    "test_rewards.py::test_a_reward_that_blocks_the_interrupt_ends_the_process_with_the_paragraph": "process",
    "test_progress.py::test_ctrl_c_says_what_was_saved_and_how_to_resume": "train",
    "test_progress.py::test_ctrl_c_during_the_evaluation_before_training": "train",
    # a fresh Python importing DARE (what it imports, start-up time)
    "test_plugins.py::test_every_register_hook_call_is_traced_with_its_plugin": "process",
    "test_plugins.py::test_import_dare_is_light": "process",
    "test_plugins.py::test_listing_commands_import_no_component_and_no_heavy_library": "process",
    "test_plugins.py::test_validate_imports_only_what_the_spec_names": "process",
    "test_plugins.py::test_validate_quickstart_imports_no_torch": "process",
    # the CLI as an unprivileged user (setpriv), and a crafted checkpoint loaded in a subprocess
    "test_bad_inputs.py::test_bad_input[output-read-only-validate]": "process",
    "test_bad_inputs.py::test_bad_input[output-read-only-train]": "process",
    "test_bad_inputs.py::test_bad_input[output-inside-private-dir]": "process",
    "test_bad_inputs.py::test_a_crafted_bin_checkpoint_runs_nothing": "process",
    "test_sweep.py::test_launchers_record_states_and_a_rerun_skips_finished_runs": "process",
    # submitit's local executor signals, stops and requeues a job; a fake sbatch; a run stopped while it saves
    "test_sweep.py::test_a_job_that_reaches_its_time_limit_is_requeued_and_resumes": "process",
    "test_sweep.py::test_slurm_sweep_of_an_8_process_launch_asks_for_8_gpus_and_launches_8_processes": "process",
    "test_sweep.py::test_a_checkpoint_being_written_is_finished_before_the_run_is_stopped": "process",
    "test_grpo_tracerl_value.py::test_value_model_trains_saves_and_resumes_bit_exact": "train",
    "test_grpo_tracerl_value.py::test_bf16_weights_train_policy_and_value_model_in_fp32_master_weights_and_resume_bit_exact":
        "train",
}
KINDS = ("unit", "train", "process")


def tier_of(nodeid: str) -> str:
    """The kind of the test ``nodeid`` (``path::function[params]``, path relative to the repository root)."""
    path, _, rest = nodeid.partition("::")
    path = path.rsplit("/", 1)[-1]
    name = rest.split("::")[-1]
    function = name.split("[")[0]
    return TEST_KIND.get(f"{path}::{name}") or TEST_KIND.get(f"{path}::{function}") or FILE_KIND.get(path, "unit")


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.nodeid)))
