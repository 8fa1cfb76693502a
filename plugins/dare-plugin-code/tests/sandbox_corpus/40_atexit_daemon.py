"""At interpreter exit, fork a child that sleeps and writes outside; the function is wrong."""
import atexit
import os
import time


def later():
    if os.fork() == 0:
        time.sleep(3)
        open("$OUTSIDE/atexit.txt", "w").write("late")


atexit.register(later)


def f():
    return 0
