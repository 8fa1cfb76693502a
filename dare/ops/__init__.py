"""Operations on models, specs and plugins outside a run: export a model, generate text, profile and estimate a
spec's training memory, render a new plugin package.

* :mod:`dare.ops.export`: ``dare export`` (an adapter or a trainer checkpoint to an official-format model);
* :mod:`dare.ops.generate`: ``dare generate`` (prompt in, text out, with a model or everything a run used);
* :mod:`dare.ops.profiling`: ``dare profile SPEC`` (parameters, peak memory, throughput over a few steps);
* :mod:`dare.ops.memory_estimate`: ``dare profile SPEC --estimate`` (per-GPU memory from the model config);
* :mod:`dare.ops.scaffold`: ``dare new-plugin`` (the plugin package from ``dare/templates/plugin``).
"""
