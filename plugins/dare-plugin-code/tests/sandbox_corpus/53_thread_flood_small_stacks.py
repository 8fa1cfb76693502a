"""Start 700 threads with 32 KiB stacks at once (RLIMIT_NPROC does not bind root, each thread is a pid of
the host, whose pid_max may be 32768); f() == 1 if all 700 ran at once."""
import threading
import time

threading.stack_size(32768)
started = 0
try:
    for _ in range(700):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except RuntimeError as exc:
    print("stopped:", exc)


def f():
    return 1 if started >= 700 else 0
