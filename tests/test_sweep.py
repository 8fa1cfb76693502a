"""`dare sweep`: grid parsing, run names, validation before any run starts, the record, launchers (local
subprocesses and submitit's local executor) with a stand-in run command. benchmarks/sweep_acceptance.py runs real
RL sweeps (kill -9 and resume, submitit = local)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dare.errors import DareError
from dare.sweep import SweepRun, parse_grid, parse_seeds, plan_runs, run_name, run_sweep
from dare.sweep import launchers as L


def test_parse_grid_values_are_yaml():
    assert parse_grid(["algorithm.name=d1,tracerl", "train.learning_rate=1e-4,3.0e-4", 'x.y="a,b",c', "x.z=[1,2],[3]"]) == [
        ("algorithm.name", ["d1", "tracerl"]), ("train.learning_rate", ["1e-4", 3.0e-4]), ("x.y", ["a,b", "c"]),
        ("x.z", [[1, 2], [3]])]
    for bad, words in [("algorithm.name", "KEY=V1,V2"), ("a=", "at least one value"), ("train.seed=1,2", "--seeds"),
                       ("output.dir=a,b", "output.dir"), ("a.b=1,1", "listed twice")]:
        with pytest.raises(DareError, match=words):
            parse_grid([bad])
    with pytest.raises(DareError, match="given twice"):
        parse_grid(["a.b=1", "a.b=2"])


def test_parse_seeds_and_run_names():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("3-5,9") == [3, 4, 5, 9]
    for bad in ("a", "-1", "1,1", ""):
        with pytest.raises(DareError, match="--seeds"):
            parse_seeds(bad)
    assert run_name({"algorithm.name": "d1"}, 0) == "algorithm.name=d1,seed=0"
    assert run_name({"train.learning_rate": 3e-4, "sampler.params": {"steps": 8}}, 2) == \
        "train.learning_rate=0.0003,sampler.params=__steps__8_,seed=2"
    long = run_name({"x": "a" * 300}, 1)
    assert len(long) == 120 and long != run_name({"x": "a" * 299 + "b"}, 1)


@pytest.fixture()
def sft_spec(tmp_path, tiny_llada_dir):
    spec = {"model": {"path": str(tiny_llada_dir)},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "prompt_template": "{{ extra_info.puzzle }}",
                               "chat_template": False, "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"}, "sampler": {"name": "llada", "params": {"gen_length": 8, "steps": 8, "block_length": 8}},
            "train": {"learning_rate": 1e-3, "max_steps": 1, "seed": 5},
            "eval": {"benchmarks": ["sudoku"]}, "output": {"dir": str(tmp_path / "single")}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_plan_sets_the_seeds_and_the_directory(sft_spec, tmp_path):
    from dare.runspec import load_spec

    runs = plan_runs(str(sft_spec), parse_grid(["train.learning_rate=1e-3,2e-3"]), [0, 7], tmp_path / "sw")
    # values as typed (YAML reads 1e-3 as text; the spec's float field converts it)
    assert [r.name for r in runs] == ["train.learning_rate=1e-3,seed=0", "train.learning_rate=1e-3,seed=7",
                                      "train.learning_rate=2e-3,seed=0", "train.learning_rate=2e-3,seed=7"]
    spec = load_spec(str(sft_spec), overrides=runs[3].overrides)
    assert (spec.train.seed, spec.eval.seed, spec.train.learning_rate) == (7, 7, 2e-3)
    assert spec.output.dir == str(tmp_path / "sw" / runs[3].name) and runs[3].settings == {"train.learning_rate": "2e-3"}
    assert len({r.spec_hash for r in runs}) == 4


def test_bad_grids_fail_before_any_run_naming_the_key(sft_spec, tmp_path):
    out = tmp_path / "sw"
    with pytest.raises(DareError, match=r"--grid train\.learnin_rate \(value 1\): unknown key"):
        run_sweep(str(sft_spec), parse_grid(["train.learnin_rate=1"]), [0], out, L.LocalLauncher())
    with pytest.raises(DareError, match=r"--grid train\.max_steps \(value -2\): Input should be greater than 0"):
        run_sweep(str(sft_spec), parse_grid(["train.max_steps=1,-2"]), [0, 1], out, L.LocalLauncher())
    with pytest.raises(DareError, match=r"--grid algorithm\.name \(value nope\): unknown objective 'nope'"):
        run_sweep(str(sft_spec), parse_grid(["algorithm.name=sft,nope"]), [0], out, L.LocalLauncher())
    with pytest.raises(DareError, match=r"with --grid algorithm\.name=d1: .*rewards"):  # d1 needs what sft does not
        run_sweep(str(sft_spec), parse_grid(["algorithm.name=sft,d1"]), [0], out, L.LocalLauncher())
    assert not out.exists()  # nothing started, nothing written


def _stand_in(fail: set[str] = frozenset()):
    """A run command that writes what a finished `dare run` leaves (run.json with the spec hash, report.json),
    or exits 3 for the runs named in ``fail``."""
    def command(spec_path, run, *launch):
        code = (f"import json, pathlib, sys; d = pathlib.Path({str(run.dir)!r}); d.mkdir(parents=True, exist_ok=True)\n"
                f"if {run.name in fail}: sys.exit(3)\n"
                f"(d / 'run.json').write_text(json.dumps({{'spec_hash': {run.spec_hash!r}}}))\n"
                f"(d / 'report.json').write_text('{{}}'); print('trained', {run.seed})")
        return [sys.executable, "-c", code]
    return command


@pytest.mark.parametrize("launcher", [L.LocalLauncher(parallel=2, poll_seconds=0.05),
                                      L.SubmititLauncher(cluster="local", poll_seconds=0.2)], ids=["local", "submitit-local"])
def test_launchers_record_states_and_a_rerun_skips_finished_runs(sft_spec, tmp_path, monkeypatch, launcher):
    out = tmp_path / "sw"
    grid = parse_grid(["train.learning_rate=0.001,0.002"])
    monkeypatch.setattr(L, "run_command", _stand_in(fail={"train.learning_rate=0.002,seed=1"}))
    res = run_sweep(str(sft_spec), grid, [0, 1], out, launcher)
    assert res["states"] == {"train.learning_rate=0.001,seed=0": "finished", "train.learning_rate=0.001,seed=1": "finished",
                             "train.learning_rate=0.002,seed=0": "finished", "train.learning_rate=0.002,seed=1": "failed"}
    record = json.loads((out / "sweep.json").read_text())
    assert record["grid"] == {"train.learning_rate": [0.001, 0.002]} and record["seeds"] == [0, 1]
    assert [r["state"] for r in record["runs"]] == ["finished", "finished", "finished", "failed"]
    logs = [Path(r["log"]).read_text() for r in record["runs"][:3]]
    assert all(f"trained {s}" in text for s, text in zip([0, 1, 0], logs))  # each run's output in its log, next to it
    assert all(Path(r["log"]).parent.is_relative_to(out / "logs") for r in record["runs"])
    started = []
    monkeypatch.setattr(L, "run_command", lambda spec, run, *launch: started.append(run.name) or _stand_in()(spec, run))
    res = run_sweep(str(sft_spec), grid, [0, 1], out, launcher)
    assert started == ["train.learning_rate=0.002,seed=1"]  # finished runs are not started again
    assert set(res["states"].values()) == {"finished"}


def test_run_command_launches_several_processes_with_torchrun(sft_spec, tmp_path):
    (run,) = plan_runs(str(sft_spec), [], [3], tmp_path / "sw")
    dare = str(Path(sys.executable).parent / "dare")  # the installed console script, never ./dare of the cwd
    assert Path(dare).is_file()
    cmd = L.run_command("s.yaml", run, L.RunLaunch(processes=4))
    assert cmd[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4"]
    assert cmd[6:9] == [dare, "run", "s.yaml"] and "train.seed=3" in cmd and "eval.seed=3" in cmd
    assert L.run_command("s.yaml", run)[:2] == [dare, "run"]
    cmd = L.run_command("s.yaml", run, L.RunLaunch(processes=8, accelerate_config="examples/accelerate/fsdp2.yaml"))
    assert cmd[1:10] == ["-m", "accelerate.commands.launch", "--config_file", "examples/accelerate/fsdp2.yaml",
                         "--num_processes", "8", dare, "run", "s.yaml"]
    cmd = L.run_command("s.yaml", run, L.RunLaunch(processes=16, nodes=2))  # every node: its rank and the first node
    assert cmd[1:13] == ["-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "{node_rank}", "--master_addr",
                         "{master_addr}", "--master_port", "{master_port}", "--nproc_per_node", "8"]


def _run_with_launch(launch):
    return SweepRun("r", {}, 0, [], Path("r"), launch=launch)


def test_a_run_is_launched_as_its_spec_says_unless_flags_override_it():
    recipes = Path(__file__).parents[1] / "examples" / "recipes"
    d1 = yaml.safe_load((recipes / "d1-llada-8b-gsm8k.yaml").read_text())["launch"]
    tracerl = yaml.safe_load((recipes / "tracerl-sdar-8b-math.yaml").read_text())["launch"]
    got = L.resolve_launch(_run_with_launch(d1))
    assert (got.processes, got.nodes, got.gpus_per_node, got.accelerate_config) == (8, 1, 8, "examples/accelerate/zero2.yaml")
    assert got.describe() == ("1 node x 8 GPUs, 8 processes, accelerate examples/accelerate/zero2.yaml (from the spec's "
                              "launch.num_processes, launch.num_machines, launch.accelerate_config)")
    got = L.resolve_launch(_run_with_launch(tracerl))
    assert (got.processes, got.nodes, got.per_node, got.gpus_per_node) == (32, 4, 8, 8)
    got = L.resolve_launch(_run_with_launch(d1), gpus_per_run=4, accelerate_config="examples/accelerate/fsdp2.yaml")
    assert (got.processes, got.gpus_per_node, got.accelerate_config) == (4, 4, "examples/accelerate/fsdp2.yaml")
    assert got.source == "from flags --gpus-per-run, --accelerate-config and the spec's launch.num_machines"
    got = L.resolve_launch(_run_with_launch(None))
    assert (got.processes, got.nodes, got.gpus_per_node, got.accelerate_config) == (1, 1, 0, None)
    assert L.resolve_launch(_run_with_launch(d1), gpus_per_run=0).describe().startswith("1 node x no GPU, 1 process,")
    with pytest.raises(DareError, match="8 processes do not divide over 3 nodes"):
        L.resolve_launch(_run_with_launch(d1), nodes_per_run=3)
    with pytest.raises(DareError, match="asks for 4 nodes.*--launcher local cannot give"):
        L.LocalLauncher().resolve(_run_with_launch(tracerl))
    with pytest.raises(DareError, match="save window"):
        L.SubmititLauncher(cluster="slurm", timeout_min=5, save_window_s=600).resolve(_run_with_launch(d1))


def test_a_launch_whose_processes_do_not_divide_over_its_machines_is_refused(sft_spec, tmp_path):
    from dare.errors import SpecError
    from dare.runspec import load_spec

    with pytest.raises(SpecError, match="num_processes 8 is not a multiple of num_machines 3"):
        load_spec(str(sft_spec), overrides=["launch.num_processes=8", "launch.num_machines=3"])
    (run,) = plan_runs(str(sft_spec), [], [0], tmp_path / "sw", ["launch.num_processes=16", "launch.num_machines=2"])
    assert L.resolve_launch(run).describe().startswith("2 nodes x 8 GPUs, 16 processes, torchrun")


def test_each_node_of_a_multi_node_job_fills_in_its_rank_and_the_first_host(monkeypatch):
    launch = L.resolve_launch(_run_with_launch({"num_processes": 32, "num_machines": 4,
                                                "accelerate_config": "examples/accelerate/zero3.yaml"}))
    job = L.RunJob(L.run_command("s.yaml", _run_with_launch(None), launch), cwd=".", run_dir="r")
    for k, v in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "77", "SLURM_NODEID": "2", "SLURM_PROCID": "2",
                 "SLURM_LOCALID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "4",
                 "SLURM_JOB_NODELIST": "gpu[07-10]"}.items():
        monkeypatch.setenv(k, v)
    cmd = job.node_command()
    i = cmd.index("--num_machines")
    assert cmd[i:i + 10] == ["--num_machines", "4", "--machine_rank", "2", "--main_process_ip", "gpu07",
                             "--main_process_port", cmd[i + 7], "--num_processes", "32"]
    assert 29500 <= int(cmd[i + 7]) < 30500


def test_a_sweep_child_imports_the_installed_dare_not_the_working_directorys(tmp_path, monkeypatch):
    """A ``dare/`` package in the working directory is not what a sweep's run imports: the console script's
    interpreter does not put the working directory on sys.path (nor does ``python -P``)."""
    (tmp_path / "dare").mkdir()
    (tmp_path / "dare" / "__init__.py").write_text("raise SystemExit('the working directory was imported')\n")
    (tmp_path / "dare" / "cli.py").write_text("raise SystemExit('the working directory was imported')\n")
    from dare.sweep.plan import SweepRun

    run = SweepRun("r", {}, 0, [], tmp_path / "r")
    cmd = L.run_command("s.yaml", run)[:-2] + ["--version"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "working directory" not in out.stderr, out.stderr
    monkeypatch.setattr(L.Path, "is_file", lambda self: False)  # no console script: python -P -m dare.cli
    cmd = L.run_command("s.yaml", run)
    assert cmd[:4] == [sys.executable, "-P", "-m", "dare.cli"]
    out = subprocess.run(cmd[:4] + ["--version"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "working directory" not in out.stderr, out.stderr


def test_cli_dry_run_lists_the_runs(run_cli, sft_spec, tmp_path):
    code, out, err = run_cli("sweep", str(sft_spec), "--grid", "train.max_steps=1,2", "--seeds", "0,1", "-o",
                             str(tmp_path / "sw"), "--dry-run")
    assert code == 0, err
    assert f"pending      {tmp_path / 'sw' / 'train.max_steps=2,seed=1'}" in out and "4 runs (dry run" in out
    assert not (tmp_path / "sw").exists()
    code, out, _ = run_cli("sweep", "--help")
    assert "How to read DIR/comparison.md" in out and "too few seeds to test" in out and "--power" in out
    code, _, err = run_cli("sweep", str(sft_spec), "--seeds", "0,1", "-o", str(tmp_path / "sw"), "--dry-run", "--power", "0")
    assert code != 0 and "--power takes the difference to detect" in err and "Traceback" not in err


def test_a_grid_over_the_run_limit_is_refused_before_any_validation(run_cli, sft_spec, tmp_path, monkeypatch):
    """1000 x 1000 values (a million runs), even with --dry-run, are refused at once naming the count and the flag,
    before any run is planned or validated; --max-runs raises the limit; a seed range is counted, not expanded."""
    import time

    import dare.sweep

    def never(*args, **kwargs):
        raise AssertionError("a run was planned")

    monkeypatch.setattr(dare.sweep, "plan_runs", never)
    values = ",".join(str(i) for i in range(1000))
    started = time.monotonic()
    code, _, err = run_cli("sweep", str(sft_spec), "--grid", f"train.max_steps={values}", "--grid",
                           f"train.seed_offset={values}", "-o", str(tmp_path / "sw"), "--dry-run")
    assert code == 2 and time.monotonic() - started < 10
    assert ("the sweep would plan 1,000,000 runs (1000 (train.max_steps) x 1000 (train.seed_offset) x 1 (seeds)), "
            "more than the limit of 1,000") in err
    assert "--max-runs 1000000" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("sweep", str(sft_spec), "--seeds", "0-99999999999", "-o", str(tmp_path / "sw"), "--dry-run")
    assert code == 2 and "the sweep would plan 100,000,000,000 runs (100000000000 (seeds))" in err
    code, _, err = run_cli("sweep", str(sft_spec), "--grid", "train.max_steps=1,2", "--seeds", "0,1", "-o",
                           str(tmp_path / "sw"), "--dry-run", "--max-runs", "3")
    assert code == 2 and "the sweep would plan 4 runs" in err and "--max-runs 4" in err
    assert not (tmp_path / "sw").exists()
    from dare.sweep import check_run_count, count_seeds

    assert count_seeds("0-4,7") == 6 and count_seeds("x") is None
    assert check_run_count([("a", [1, 2]), ("b", [1, 2, 3])], 2, 12) == 12


def test_dry_run_shows_started_and_recorded_runs_as_they_are(run_cli, sft_spec, tmp_path):
    """A run that started and did not finish is ``interrupted`` (the sweep resumes it), a run the last sweep
    recorded as failed is ``failed``; the others stay ``pending``."""
    out_dir = tmp_path / "sw"
    runs = plan_runs(str(sft_spec), [("train.max_steps", [1, 2])], [0], out_dir)
    started, failed = runs
    started.dir.mkdir(parents=True)
    (started.dir / "run.json").write_text(json.dumps({"spec_hash": started.spec_hash}))
    (out_dir / "sweep.json").write_text(json.dumps({"runs": [{"name": failed.name, "state": "failed"}]}))
    code, out, err = run_cli("sweep", str(sft_spec), "--grid", "train.max_steps=1,2", "-o", str(out_dir), "--dry-run")
    assert code == 0, err
    assert f"interrupted  {started.dir}" in out and f"failed       {failed.dir}" in out, out


def test_slurm_launcher_needs_sbatch(run_cli, sft_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    code, _, err = run_cli("sweep", str(sft_spec), "--seeds", "0", "-o", str(tmp_path / "sw"), "--launcher", "slurm")
    assert code == 2 and "sbatch and srun are not on this machine's PATH" in err and not (tmp_path / "sw").exists()
    code, _, err = run_cli("sweep", str(sft_spec), "--seeds", "0", "-o", str(tmp_path / "sw"), "--slurm-mem", "8G")
    assert code == 2 and "--slurm-mem is for --launcher slurm" in err


_FAKE_SLURM = {  # sbatch keeps the script it was given and answers a job id; sacct says the job completed
    "sbatch": 'cp "${@: -1}" "$FAKE_SLURM_DIR/job.sh"; echo "Submitted batch job 4242"\n',
    "srun": "exit 0\n",
    "sacct": 'printf "JobID|State|NodeList\\n4242|COMPLETED|gpu01\\n4242_0|COMPLETED|gpu01\\n"\n',
    "scontrol": "exit 0\n",
}


def test_slurm_sweep_of_an_8_process_launch_asks_for_8_gpus_and_launches_8_processes(run_cli, sft_spec, tmp_path,
                                                                                    monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in _FAKE_SLURM.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path))
    acc = str(Path(__file__).parents[1] / "examples" / "accelerate" / "zero2.yaml")
    out = tmp_path / "sw"
    code, _, err = run_cli("sweep", str(sft_spec), "--seeds", "0", "-o", str(out), "--launcher", "slurm",
                           "--set", "launch.num_processes=8", "--set", f"launch.accelerate_config={acc}",
                           "--slurm-mem", "512G", "--slurm-account", "proj", "--slurm-qos", "high",
                           "--slurm-save-window-s", "900", "--slurm-timeout-min", "600")
    assert f"asks for 1 node x 8 GPUs, 8 processes, accelerate {acc} (from the spec's launch.num_processes" in err
    script = (tmp_path / "job.sh").read_text().splitlines()
    for line in ("#SBATCH --gpus-per-node=8", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --mem=512G",
                 "#SBATCH --account=proj", "#SBATCH --qos=high", "#SBATCH --signal=USR2@900", "#SBATCH --time=600"):
        assert line in script
    (entry,) = json.loads((out / "sweep.json").read_text())["runs"]
    assert entry["job_id"].startswith("4242") and entry["launch"]["processes"] == 8 and entry["launch"]["gpus_per_node"] == 8
    cmd = entry["command"]  # what the job runs: accelerate with 8 processes
    assert cmd[1:7] == ["-m", "accelerate.commands.launch", "--config_file", acc, "--num_processes", "8"]
    assert code == 1 and entry["state"] == "failed"  # the fake job wrote no result


def test_a_job_that_reaches_its_time_limit_is_requeued_and_resumes(sft_spec, tmp_path, monkeypatch):
    """submitit's local executor signals the job save_window_s before its time limit: the run is stopped (SIGTERM)
    and the job requeued; the requeued job's command finds what the first one left and finishes."""
    out = tmp_path / "sw"

    def command(spec_path, run, *launch):
        code = (f"import json, pathlib, signal, sys, time; d = pathlib.Path({str(run.dir)!r}); d.mkdir(parents=True, exist_ok=True)\n"
                "log = d / 'attempts.txt'; n = len(log.read_text().splitlines()) if log.exists() else 0\n"
                "log.write_text((log.read_text() if log.exists() else '') + 'start\\n')\n"
                "def stop(*a):\n    log.write_text(log.read_text() + 'stopped by SIGTERM\\n'); sys.exit(143)\n"
                "signal.signal(signal.SIGTERM, stop)\n"
                "if n == 0:\n    time.sleep(120)\n"
                f"(d / 'run.json').write_text(json.dumps({{'spec_hash': {run.spec_hash!r}}}))\n"
                "(d / 'report.json').write_text('{}'); log.write_text(log.read_text() + 'finished\\n')")
        return [sys.executable, "-c", code]

    monkeypatch.setattr(L, "run_command", command)
    launcher = L.SubmititLauncher(cluster="local", poll_seconds=0.2, timeout_min=0.25, save_window_s=10)
    res = run_sweep(str(sft_spec), [], [0], out, launcher)
    (run,) = res["runs"]
    assert res["states"] == {run.name: "finished"}
    assert (run.dir / "attempts.txt").read_text().splitlines() == ["start", "stopped by SIGTERM", "start", "finished"]


def test_a_checkpoint_being_written_is_finished_before_the_run_is_stopped(tmp_path):
    staged = tmp_path / "checkpoints" / ".staging" / "checkpoint-4"
    staged.mkdir(parents=True)
    code = ("import pathlib, shutil, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143 if pathlib.Path(sys.argv[1]).exists() else 0))\n"
            "time.sleep(1.5); shutil.rmtree(sys.argv[1]); time.sleep(60)")
    job = L.RunJob([sys.executable, "-c", code, str(staged)], cwd=str(tmp_path), run_dir=str(tmp_path), save_window_s=30)
    job._proc = subprocess.Popen(job.command)
    time.sleep(0.3)
    assert job.stop_run() == 0  # SIGTERM came after the save had finished (the stand-in exits 0 then, 143 before)
    staged.mkdir()  # a save that outlasts the window: the run is stopped anyway, after window - margin seconds
    job._proc = subprocess.Popen([sys.executable, "-c", code.replace("time.sleep(1.5)", "time.sleep(60)"), str(staged)])
    time.sleep(0.3)
    began = time.monotonic()
    assert job.stop_run(window_s=2, margin_s=1) == 143
    assert 1 <= time.monotonic() - began < 5


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DARE_SLOW") != "1", reason="slow (~11 min on 2 cores): set DARE_SLOW=1")
def test_rl_sweep_survives_kill_and_submitit_equals_local(tmp_path):
    """benchmarks/sweep_acceptance.py: 2 RL objectives x 3 seeds, kill -9 of the sweep and a re-run (no finished run
    retrained, the interrupted one bit-exact with an uninterrupted run), submitit's local executor = local launcher."""
    script = Path(__file__).parents[1] / "benchmarks" / "sweep_acceptance.py"
    done = subprocess.run([sys.executable, str(script), "--work", str(tmp_path)], capture_output=True, text=True)
    checks = json.loads((tmp_path / "acceptance.json").read_text())["checks"]
    assert done.returncode == 0 and all(checks.values()), checks


def test_comparison_covers_before_after_and_evaluation_only_runs(tmp_path):
    from dare.sweep import SweepRun, write_comparison

    def fake(name, seed, stages):
        d = tmp_path / name
        (d / "eval").mkdir(parents=True)
        for stage, acc in stages.items():
            (d / "eval" / f"{stage}.json").write_text(json.dumps({"results": [
                {"name": "sudoku", "n": 8, "accuracy": acc, "mean_reward": acc, "nfe": 17, "tokens_per_second": 1.0}]}))
        (d / "run.json").write_text(json.dumps({"spec_hash": name, "source": None, "spec": {
            "train": {"seed": seed}, "eval": {"seed": seed}, "output": {"dir": str(d)}}}))
        return SweepRun(name, {}, seed, [], d)

    runs = [fake(f"seed={s}", s, {"before": 0.1, "after": 0.2 + s / 10}) for s in range(3)]
    write_comparison(tmp_path, runs, {r.name: "finished" for r in runs}, title="t")
    data = json.loads((tmp_path / "comparison.json").read_text())["grouped"]
    assert [g["label"] for g in data["groups"]] == ["all seeds (before)", "all seeds (after)"]
    assert data["differences"][0]["mean"] == pytest.approx(0.2)  # the gain, per seed: 0.1, 0.2, 0.3
    evals = [fake(f"e/seed={s}", s, {"eval": 0.5}) for s in range(2)]
    assert write_comparison(tmp_path / "e", evals, {r.name: "finished" for r in evals}, title="t") is not None
    assert json.loads((tmp_path / "e" / "comparison.json").read_text())["grouped"]["groups"][0]["stats"][0]["n"] == 2
    assert write_comparison(tmp_path / "none", evals, {r.name: "failed" for r in evals}, title="t") is None
