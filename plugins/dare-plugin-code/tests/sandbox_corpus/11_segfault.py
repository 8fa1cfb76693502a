"""Crash the interpreter with a segmentation fault."""
import faulthandler

faulthandler.disable()
faulthandler._sigsegv()


def f():
    return 1
