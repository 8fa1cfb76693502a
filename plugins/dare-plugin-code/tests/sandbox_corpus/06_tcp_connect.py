"""Connect to a TCP server of the caller on 127.0.0.1 and send a message; f() == 1 if it connected."""
import socket

OK = False
try:
    with socket.create_connection(("127.0.0.1", $TCP_PORT), timeout=1) as s:
        s.sendall(b"exfiltrated")
        OK = True
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if OK else 0
