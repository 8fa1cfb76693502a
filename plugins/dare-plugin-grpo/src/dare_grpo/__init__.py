"""DARE plugin: online-RL objectives for diffusion LMs.

Objectives (:mod:`dare_grpo.objectives`): ``d1``, ``coupled-grpo``, ``mdpo``, ``cj-grpo``, ``spg``,
``bgpo``, ``ebpo``, ``d-treerpo``, ``justgrpo``, ``espo``, ``tracerl``, ``gdpo``, ``dipo``, ``lightningrl``, built on the core's online-RL
base (:class:`dare.rl.OnlineRLObjective`, :class:`dare.rl.trainer.GRPOTrainer`: rollout, rewards, group
advantages, inner iterations, reference policy, metrics), its likelihood estimators
(:mod:`dare.diffusion.estimators`) and RL pieces (:mod:`dare.rl`). The objectives with their own rollouts
(MDPO, d-TreeRPO) or updates (SPG) bring trainer subclasses (``trainer_mdpo``, ``trainer_tree``,
``trainer_spg``); LightningRL's reward shaping and dynamic sampling are ``trainer_lightningrl``.
"""
