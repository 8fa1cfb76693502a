"""Change kernel and process settings through /proc and /sys; f() == 1 if any write worked."""
OK = False
for path, value in (("/proc/self/oom_score_adj", "-1000"), ("/proc/sys/kernel/core_pattern", "|/bin/sh"),
                    ("/sys/fs/cgroup/cgroup.procs", "1"), ("/proc/sysrq-trigger", "h")):
    try:
        with open(path, "w") as fh:
            fh.write(value)
        OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
