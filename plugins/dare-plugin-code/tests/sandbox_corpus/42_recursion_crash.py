"""Lift the recursion limit and recurse until the C stack overflows."""
import sys

sys.setrecursionlimit(10**8)


def down(n):
    return down(n + 1) + 1


down(0)


def f():
    return 1
