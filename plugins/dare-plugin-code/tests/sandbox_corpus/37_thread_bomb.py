"""Start thousands of sleeping threads (each a task for the process cap); f() == 1 if 1000 started."""
import threading
import time

started = 0
try:
    for _ in range(5000):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        started += 1
except RuntimeError as exc:
    print("stopped:", exc)


def f():
    return 1 if started >= 1000 else 0
