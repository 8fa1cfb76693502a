"""Connect through the _socket C module (no socket.py), then through a Unix socket; f() == 1 if any worked."""
import _socket

OK = False
for family, address in ((_socket.AF_INET, ("127.0.0.1", $TCP_PORT)), (_socket.AF_UNIX, "\0dare-corpus-probe")):
    try:
        s = _socket.socket(family, _socket.SOCK_STREAM)
        s.connect(address)
        s.send(b"exfiltrated")
        OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
