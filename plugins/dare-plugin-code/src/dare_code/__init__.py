"""``dare-plugin-code``: the ``code`` reward and the code benchmarks (``humaneval``, ``humanevalplus``,
``mbpp``).

Programs are scored by one of two backends (the reward's ``backend`` parameter):

* ``local``: the layered POSIX sandbox of :mod:`dare_code.sandbox` on this machine
  (plugins/dare-plugin-code/docs/sandbox.md says what each layer stops in each mode);
* ``remote``: an HTTP code-execution service with SandboxFusion's ``POST /run_code`` API
  (:mod:`dare_code.service`).
"""
