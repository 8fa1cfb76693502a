"""Send a UDP datagram to the caller on 127.0.0.1 (Landlock does not cover UDP); f() == 1 if sent."""
import socket

OK = False
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    OK = s.sendto(b"exfiltrated", ("127.0.0.1", $UDP_PORT)) > 0
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if OK else 0
