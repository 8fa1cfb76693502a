"""DARE plugin: online-RL objectives for diffusion LMs.

Objectives (:mod:`dare_grpo.objectives`): ``d1``, ``coupled-grpo``, ``mdpo``, ``cj-grpo``, ``spg``,
``bgpo``, ``ebpo``, ``d-treerpo``, ``justgrpo``, ``espo``, ``tracerl``, ``gdpo``, ``dipo``, ``lightningrl``, built on the core's online-RL
base (:class:`dare.rl.OnlineRLObjective`, :class:`dare.rl.trainer.GRPOTrainer`: rollout, rewards, group
advantages, inner iterations, reference policy, metrics), its likelihood estimators
(:mod:`dare.diffusion.estimators`) and RL pieces (:mod:`dare.rl`). The objectives with their own rollouts
(MDPO, d-TreeRPO) or updates (SPG) bring trainer subclasses; LightningRL's reward shaping and dynamic sampling
and TraceRL's value model are trainer hooks too.

Layout, one rule: every objective is under :mod:`dare_grpo.objectives`, a module ``<name>.py`` when its
``Params``, objective class and loss fit in one file, a package ``<name>/`` when the algorithm brings its own
rollout, loss pieces or trainer hooks (``mdpo``, ``dtreerpo``, ``spg``, ``tracerl``, ``lightningrl``). A package's
files have fixed roles: ``objective.py`` (the ``Params`` and the registered objective class), ``rollout.py`` (its
decoder or rollout structure), ``loss.py`` (pure loss pieces the objective and the trainer share), ``trainer.py``
(its :class:`dare.rl.trainer.GRPOTrainer` subclass, the :class:`dare.rl.hooks.RLStepHooks` it overrides) and
``__init__.py`` (re-exports the class and its ``Params``); a package has only the roles it needs.
"""
