"""Double-fork a daemon in a new session that outlives the program (it would write outside later)."""
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):
            time.sleep(0.1)
            try:
                open("$OUTSIDE/daemon.txt", "w").write("still alive")
            except OSError:
                pass
    os._exit(0)


def f():
    return 0
