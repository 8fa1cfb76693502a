"""The plugin system: the hook surface plugins implement, their discovery and hook calls, the registry of the
components they register, and what ``dare plugins`` prints about those components.

* :mod:`dare.plugins.hookspecs`: the ``register_*`` hooks (the whole plugin surface) and ``dare.hookimpl``;
* :mod:`dare.plugins.manager`: entry-point discovery (group ``dare``), per-plugin hook calls, load failures,
  ``get_registry()``;
* :mod:`dare.plugins.registry`: components by kind and name (lazy ``"module:Class"`` references), conflicts;
* :mod:`dare.plugins.paramdocs`: a component's ``params`` as a table (``dare plugins NAME``);
* :mod:`dare.plugins.matrix`: the model families x online-RL objectives table (``dare plugins --matrix``).

Importing this package imports nothing else (``import dare`` stays free of pydantic and torch).
"""
