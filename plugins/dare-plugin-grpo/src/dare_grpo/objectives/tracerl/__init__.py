"""TraceRL (arXiv 2509.06949): objective (``TraceRL``, ``TraceRLParams``) and trainer (``TraceRLValueTrainer``:
the optional value model, its step-level GAE and value step)."""

from dare_grpo.objectives.tracerl.objective import TraceRL, TraceRLParams

__all__ = ["TraceRL", "TraceRLParams"]
