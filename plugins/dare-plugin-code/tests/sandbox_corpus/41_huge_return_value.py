"""Answer with a value far larger than the message limit (a 200 MiB string) and a deeply nested list."""
# tests: assert f() == 1\nassert g() == 1


def f():
    return "x" * (200 << 20)


def g():
    value = []
    for _ in range(100_000):
        value = [value]
    return value
