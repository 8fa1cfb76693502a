"""Create a subinterpreter (it starts without the guard's audit hooks) and, from it, send a UDP datagram to
the caller and write a file outside; f() == 1 if the subinterpreter ran its code."""
OK = False
interpreters = None
for name in ("_xxsubinterpreters", "_interpreters"):
    try:
        interpreters = __import__(name)
        break
    except ImportError as exc:
        print("refused:", exc)
if interpreters is not None:
    try:
        interp = interpreters.create()
        code = (
            "import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.sendto(b'from a subinterpreter', ('127.0.0.1', $UDP_PORT))\n"
            "open('$OUTSIDE/from_subinterpreter.txt', 'w').write('escaped')\n"
        )
        (interpreters.run_string if hasattr(interpreters, "run_string") else interpreters.exec)(interp, code)
        OK = True
    except Exception as exc:  # noqa: BLE001
        print("refused:", type(exc).__name__, exc)


def f():
    return 1 if OK else 0
