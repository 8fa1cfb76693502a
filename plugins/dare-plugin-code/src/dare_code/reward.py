"""The ``code`` reward component: parameters (extraction, time budget, sandbox limits, backend) and
scoring through the ``local`` sandbox (:func:`dare_code.outcome.code_outcome`) or a ``remote``
execution service (:func:`dare_code.service.run_on_service`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, HttpUrl, model_validator

from dare.components import Params, Reward
from dare_code.outcome import PRELUDE, build_tests, code_outcome, entry_point, extract_program, task_helpers
from dare_code.sandbox import SandboxLimits, uid_mode_problem
from dare_code.service import run_on_service

__all__ = ["CodeParams", "CodeReward"]


class CodeParams(Params):
    """Parameters of the ``code`` reward: program extraction, time budget, sandbox limits, backend."""

    extraction: Literal["auto", "fenced", "mbpp"] = Field(
        "auto", description="Program extraction: 'auto' = the MBPP rule on data_source 'mbpp', else fenced blocks."
    )
    fenced_block: Literal["last", "first_with_def"] = Field(
        "last", description="Which fenced block: the last one, or rLLM/DARE's first block that defines a function."
    )
    per_test_timeout_s: float = Field(
        1.0, gt=0, description="Wall seconds per test (DARE: 1); a program's budget is this times its tests."
    )
    timeout_s: float = Field(30.0, gt=0, description="Cap on one program's wall-clock budget, seconds.")
    cpu_time_s: int = Field(30, ge=1, description="RLIMIT_CPU per process, seconds (backend 'local').")
    memory_mb: int = Field(1024, ge=64, description="Memory per process, MiB (local: RLIMIT_AS; remote: memory_limit_MB).")
    max_processes: int = Field(16, ge=1, description="Processes/threads the program may run at once (backend 'local').")
    max_file_mb: int = Field(16, ge=1, description="Largest file (stdout included) the program may write, MiB (local).")
    isolation: Literal["auto", "uid", "process"] = Field(
        "auto",
        description="Backend 'local': 'uid' = a private uid and network namespace per run (root only); 'process' = "
        "the caller's uid; 'auto': uid where possible.",
    )
    backend: Literal["local", "remote"] = Field(
        "local", description="'local': this machine's sandbox; 'remote': an HTTP service with SandboxFusion's "
        "POST /run_code API at 'url'."
    )
    url: HttpUrl | None = Field(None, description="Backend 'remote': the service's base URL, e.g. http://host:8080.")
    request_timeout_s: float = Field(
        60.0, gt=0, description="Backend 'remote': HTTP timeout of one request, seconds (set it "
        "above the program's budget)."
    )

    @model_validator(mode="after")
    def _remote_needs_url(self):
        if self.backend == "remote" and self.url is None:
            raise ValueError("backend 'remote' needs 'url' (the execution service, e.g. http://127.0.0.1:8080)")
        if self.backend == "local" and self.url is not None:
            raise ValueError("'url' is for backend 'remote'; set backend: remote or drop url")
        return self


class CodeReward(Reward):
    """Program from the completion passes the sample's tests in the sandbox (1/0; format error 0).

    Rule: DARE ``code_reward.py`` (rLLM ``RewardCodeFn``), see :mod:`dare_code.outcome`; the local
    sandbox: :mod:`dare_code.sandbox`; the remote service: :mod:`dare_code.service`. A program that
    fails, hangs or misbehaves scores 0. ``score`` raises :class:`~dare.errors.DataError` for a
    malformed ``reward_model.ground_truth`` and :class:`~dare_code.sandbox.SandboxError` when the
    sandbox cannot run here or the service cannot be reached (the caller logs and scores 0).
    """

    name = "code"
    Params = CodeParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        p = self.params
        if p.backend == "remote":
            return self._remote_score(completion, sample)
        limits = SandboxLimits(p.timeout_s, p.cpu_time_s, p.memory_mb, p.max_processes, p.max_file_mb)
        return code_outcome(
            completion, sample, limits, p.per_test_timeout_s, p.extraction, p.fenced_block, p.isolation
        ).score

    def _remote_score(self, completion: str, sample: dict[str, Any]) -> float:
        p = self.params
        program = extract_program(completion, sample, p.extraction, p.fenced_block)
        tests = None if program is None else build_tests(sample, program)
        if tests is None:
            return 0.0
        source, n_tests = tests
        budget = min(p.timeout_s, p.per_test_timeout_s * n_tests)
        # the task's helpers after the program: the tests call the prompt's encode_cyclic, not the program's
        entry = entry_point(sample, program) if "def check(" in source else None
        helpers = task_helpers(sample, [entry] if entry else [])
        units = [PRELUDE, program] + ([helpers] if helpers else [])
        result = run_on_service(str(p.url), units, source, budget, p.memory_mb, p.request_timeout_s)
        return 1.0 if result.passed else 0.0

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """``isolation: uid`` where this machine cannot run it (backend 'local')."""
        if self.params.backend != "local" or self.params.isolation != "uid":
            return []
        problem = uid_mode_problem()
        if problem is None:
            return []
        return [(f"{loc}.params.isolation", f"isolation 'uid' is unavailable here: {problem}; use 'auto' or 'process'")]
