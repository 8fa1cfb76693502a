"""The ``remote`` backend against a stub SandboxFusion service on 127.0.0.1.

The stub implements ``POST /run_code`` as SandboxFusion answers it (status, run_result with
status/return_code/stdout/stderr), running the script with this interpreter (``python -I``) and
``run_timeout``: harmless here because the programs are this file's own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from dare.rewards import WeightedReward
from dare_code.reward import CodeReward
from dare_code.sandbox import SandboxError

SAMPLE = {"data_source": "mbpp", "reward_model": {"ground_truth": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}}
RIGHT = "[BEGIN]\ndef add(a, b):\n    return a + b\n[DONE]"
WRONG = "[BEGIN]\ndef add(a, b):\n    return a - b\n[DONE]"
EARLY_EXIT = "[BEGIN]\nimport os\ndef add(a, b):\n    return 0\nos._exit(0)\n[DONE]"


class _Stub(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.path != "/run_code":
            self.send_error(404)
            return
        try:
            done = subprocess.run([sys.executable, "-I", "-c", body["code"]], capture_output=True, text=True,
                                  timeout=body["run_timeout"])
            run = {"status": "Finished", "execution_time": 0.1, "return_code": done.returncode,
                   "stdout": done.stdout, "stderr": done.stderr}
        except subprocess.TimeoutExpired:
            run = {"status": "TimeLimitExceeded", "execution_time": body["run_timeout"], "return_code": None,
                   "stdout": "", "stderr": ""}
        answer = {"status": "Success" if run["return_code"] == 0 else "Failed", "message": "", "compile_result": None,
                  "run_result": run, "executor_pod_name": None, "files": {}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_right_program_scores_1_wrong_0(service):
    reward = CodeReward({"backend": "remote", "url": service, "per_test_timeout_s": 2.0})
    _Stub.requests.clear()
    assert reward.score(RIGHT, SAMPLE) == 1.0
    assert reward.score(WRONG, SAMPLE) == 0.0
    fenced = CodeReward({"backend": "remote", "url": service, "extraction": "fenced"})
    assert fenced.score("no fenced program here", SAMPLE) == 0.0  # format error: nothing is sent
    assert len(_Stub.requests) == 2
    sent = _Stub.requests[0]
    assert sent["language"] == "python" and sent["run_timeout"] == 4.0 and sent["memory_limit_MB"] == 1024
    assert "def add(a, b):\n    return a + b" in sent["code"] and "assert add(-1, 1) == 0" in sent["code"]


def test_the_tasks_helpers_follow_the_program(service):
    """The prompt's helper is sent after the program: a program that redefines it to record the expected
    answer (HumanEval/38's pattern) scores 0, a solution 1."""
    prompt = 'def encode(s: str):\n    """Reverse."""\n    return s[::-1]\n\n\ndef decode(s: str):\n    """Undo."""\n'
    sample = {"data_source": "humaneval", "prompt": prompt,
              "reward_model": {"ground_truth": "def check(candidate):\n    for s in ('abc', 'xy'):\n"
                                               "        assert candidate(encode(s)) == s\n"}}
    reward = CodeReward({"backend": "remote", "url": service})
    cheat = ("```python\nseen = []\ndef encode(s):\n    seen.append(s)\n    return s\n"
             "def decode(s):\n    return seen[-1]\n```")
    assert reward.score(cheat, sample) == 0.0
    assert reward.score("```python\ndef decode(s):\n    return s[::-1]\n```", sample) == 1.0


def test_exit_0_before_the_tests_fails(service):
    reward = CodeReward({"backend": "remote", "url": service})
    assert reward.score(EARLY_EXIT, SAMPLE) == 0.0


def test_timeout_scores_0(service):
    hang = "[BEGIN]\ndef add(a, b):\n    while True:\n        pass\n[DONE]"
    reward = CodeReward({"backend": "remote", "url": service, "per_test_timeout_s": 0.5})
    assert reward.score(hang, SAMPLE) == 0.0


def test_service_down_is_a_sandbox_error_and_scores_0_in_the_sum(caplog):
    url = f"http://127.0.0.1:{_free_port()}"
    reward = CodeReward({"backend": "remote", "url": url, "request_timeout_s": 2.0})
    with pytest.raises(SandboxError, match=rf"code execution service at {url}/run_code failed \(ConnectionError"):
        reward.score(RIGHT, SAMPLE)
    total, parts = WeightedReward([(reward, 1.0)]).score_one(RIGHT, SAMPLE)
    assert total == 0.0
    assert "execution service" in caplog.text


@pytest.mark.parametrize("params, field", [
    ({"backend": "remote"}, "needs 'url'"),
    ({"backend": "remote", "url": "not a url"}, "url"),
    ({"backend": "remote", "url": "ftp://host"}, "url"),
    ({"backend": "remote", "url": "http://h:1", "request_timeout_s": 0}, "request_timeout_s"),
    ({"url": "http://h:1"}, "is for backend 'remote'"),
    ({"backend": "docker"}, "backend"),
])
def test_bad_backend_params_are_refused(params, field):
    with pytest.raises(ValidationError, match=field):
        CodeReward.Params(**params)
