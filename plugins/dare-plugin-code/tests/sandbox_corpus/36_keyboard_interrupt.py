"""Raise BaseException subclasses from the function under test (KeyboardInterrupt, SystemExit)."""
# tests: assert f() == 1\nassert f() == 1


calls = []


def f():
    calls.append(1)
    raise KeyboardInterrupt if len(calls) == 1 else SystemExit(0)
