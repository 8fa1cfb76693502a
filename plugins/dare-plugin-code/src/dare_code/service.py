"""The ``remote`` backend: run a program and its tests on an HTTP code-execution service.

API: SandboxFusion's ``POST {url}/run_code`` (https://github.com/bytedance/SandboxFusion, the service
verl's ``verl/utils/reward_score/sandbox_fusion`` calls). Request JSON::

    {"code": str, "language": "python", "run_timeout": seconds, "compile_timeout": seconds,
     "memory_limit_MB": MiB, "stdin": "", "files": {}, "fetch_files": []}

Response JSON: ``{"status": "Success" | "Failed" | "SandboxError", "message": str,
"compile_result": ..., "run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error",
"execution_time": s, "return_code": int, "stdout": str, "stderr": str}, "files": {}}``.

As verl does, the program and its tests go as one script (``PRELUDE``, the program, the tests); the
verdict is a pass when the run finished with ``return_code == 0`` **and** the last line of its stdout
is a per-call random token that the script prints after the last test (so a program that exits 0
early, before the tests, fails). The program and the tests share one process on the service, so the
separation of the ``local`` backend (:mod:`dare_code.sandbox.remote`) does not hold: a program that
reads its own source can forge the token. The isolation is the service's.

Errors: a service that cannot be reached, times out, answers with an HTTP error, or answers
``SandboxError`` (its own failure, not the program's) raises :class:`~dare_code.sandbox.SandboxError`
naming the URL; :class:`~dare.rewards.WeightedReward` logs it with the sample and scores 0.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import requests

from dare_code.sandbox.errors import SandboxError

__all__ = ["ServiceResult", "run_on_service"]


@dataclass(frozen=True)
class ServiceResult:
    """What the service said about one script: ``passed`` (the verdict above), the response's
    ``status`` and ``run_result.status``, ``return_code`` (None: it did not run), ``stdout`` and
    ``stderr`` (as returned, possibly truncated by the service)."""

    passed: bool
    status: str
    run_status: str | None
    return_code: int | None
    stdout: str
    stderr: str


def _script(units: list[str], tests: str, token: str) -> str:
    body = "\n\n".join(u.rstrip("\n") for u in units)
    return f"{body}\n\n{tests.rstrip()}\n\nprint({token!r}, flush=True)\n"


def run_on_service(
    url: str, units: list[str], tests: str, run_timeout_s: float, memory_mb: int, request_timeout_s: float
) -> ServiceResult:
    """POST ``units`` then ``tests`` as one Python script to ``{url}/run_code`` and judge the answer.

    :param url: the service's base URL (``http://host:port``; ``/run_code`` is appended).
    :param run_timeout_s: the program's wall-clock budget on the service, seconds (``run_timeout``).
    :param memory_mb: ``memory_limit_MB`` of the request.
    :param request_timeout_s: the HTTP request's own timeout (connect and read), seconds.
    :raises SandboxError: the service is unreachable, times out, answers an HTTP error, something
        other than a JSON object, or ``status: SandboxError``.
    """
    token = f"DARE-PASS-{secrets.token_hex(16)}"
    payload = {
        "code": _script(units, tests, token), "language": "python", "run_timeout": run_timeout_s,
        "compile_timeout": run_timeout_s, "memory_limit_MB": memory_mb, "stdin": "", "files": {}, "fetch_files": [],
    }
    endpoint = url.rstrip("/") + "/run_code"
    try:
        response = requests.post(endpoint, json=payload, timeout=request_timeout_s)
        response.raise_for_status()
        answer = response.json()
    except requests.RequestException as exc:
        raise SandboxError(
            f"the code execution service at {endpoint} failed ({type(exc).__name__}: {exc}); check that it is "
            f"running and that the reward's 'url' is right, or use backend 'local'"
        ) from None
    except ValueError:
        raise SandboxError(f"the code execution service at {endpoint} answered something that is not JSON") from None
    if not isinstance(answer, dict):
        raise SandboxError(f"the code execution service at {endpoint} answered {type(answer).__name__}, not an object")
    status = str(answer.get("status", ""))
    if status == "SandboxError":
        raise SandboxError(f"the code execution service at {endpoint} failed: {str(answer.get('message'))[:300]}")
    run = answer.get("run_result") if isinstance(answer.get("run_result"), dict) else {}
    code = run.get("return_code")
    stdout = str(run.get("stdout") or "")
    lines = stdout.rstrip("\n").split("\n")
    passed = status == "Success" and run.get("status") == "Finished" and code == 0 and lines[-1] == token
    return ServiceResult(passed, status, run.get("status"), code if isinstance(code, int) else None, stdout,
                         str(run.get("stderr") or ""))
