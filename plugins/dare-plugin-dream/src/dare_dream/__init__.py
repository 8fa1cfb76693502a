"""DARE plugin: the Dream model family (Dream-v0, DiffuCoder; native PyTorch) and Dream's official sampler.

:mod:`dare_dream.auto` registers this plugin's configuration and model classes with transformers' Auto
classes, so ``AutoModel.from_pretrained(dir)`` works without ``trust_remote_code``. The plugin's
``register_auto_classes`` hook imports it (DARE calls the hook before it first reads or creates a
checkpoint), and so does the first access of a name below (PEP 562). Importing the package alone is
light, as the plugin entry point :mod:`dare_dream.plugin` (loaded by every ``dare`` command) needs.
"""

__all__ = ["DreamConfig", "DreamModel", "DreamTokenizer"]


def __getattr__(name):
    if name in __all__:
        from dare_dream import auto

        return getattr(auto, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
