"""How the work of one command spreads over processes and CPU threads: the process group, sharded models and the
threads torch uses.

* :mod:`dare.scaling.distributed`: the process group (accelerate), launch checks, barriers, row shards, gathering;
* :mod:`dare.scaling.sharding`: sharded models (FSDP2, ZeRO-3): lock-step decoding, padded slices, frozen copies
  placed like the policy, ``DARE_CPU_SHARDING``;
* :mod:`dare.scaling.threads`: the CPU threads of a command (spec keys, default, load warning).

Launching on several GPUs or nodes: docs/scaling.md.
"""
