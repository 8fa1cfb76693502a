"""Read a private key only root may read (mode 0600 in a 0700 directory); f() == 1 if it got it."""
GOT = ""
for path in ("$SECRET_FILE", "/root/.ssh/id_rsa", "/root/.ssh/id_ed25519"):
    try:
        GOT += open(path).read()
    except OSError as exc:
        print("refused:", exc)
print(GOT[:300])


def f():
    return 1 if "PRIVATE KEY" in GOT else 0
