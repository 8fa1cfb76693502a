"""Start other programs: subprocess, os.system, os.posix_spawn, os.execv; f() == 1 if any ran."""
import os
import subprocess

OK = False
for action in (
    lambda: subprocess.run(["/bin/sh", "-c", "echo hi"], check=True),
    lambda: os.system("echo hi") == 0 or None,
    lambda: os.posix_spawn("/bin/sh", ["sh", "-c", "true"], {}),
    lambda: os.execv("/bin/sh", ["sh", "-c", "true"]),
):
    try:
        if action() is not None:
            OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
