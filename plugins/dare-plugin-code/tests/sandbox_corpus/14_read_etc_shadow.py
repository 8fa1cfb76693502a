"""Read /etc/shadow (password hashes); f() == 1 if it got them."""
GOT = ""
try:
    GOT = open("/etc/shadow").read()
except OSError as exc:
    print("refused:", exc)
print(GOT[:200])


def f():
    return 1 if "root:" in GOT else 0
