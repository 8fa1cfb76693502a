"""Ask the kernel for writable and executable memory (where machine code written from Python could
be run): an anonymous PROT_WRITE|PROT_EXEC mapping; f() == 1 if it was granted."""
import mmap

try:
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(b"\xc3")
    granted = 1
except OSError as exc:
    print("refused:", exc)
    granted = 0


def f():
    return granted
