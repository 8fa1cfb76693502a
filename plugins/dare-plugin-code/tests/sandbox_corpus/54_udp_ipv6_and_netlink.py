"""Send a UDP datagram to the caller on ::1 and list the host's listening TCP sockets with a NETLINK_SOCK_DIAG
query (process mode without bubblewrap shares the host's network namespace); f() == 1 if either worked."""
import socket
import struct

OK = False
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    OK = s.sendto(b"exfiltrated", ("::1", $UDP6_PORT)) > 0
except OSError as exc:
    print("refused:", exc)
try:
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
    # inet_diag_req_v2: family AF_INET, protocol TCP, ext 0, pad, states (LISTEN), inet_diag_sockid (48 bytes)
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 1 << 10) + bytes(48)
    nl.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req)  # SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST|DUMP
    OK = OK or len(nl.recv(65536)) > 20
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if OK else 0
