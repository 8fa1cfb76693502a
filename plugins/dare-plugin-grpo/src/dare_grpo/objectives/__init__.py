"""RL objectives of ``dare-plugin-grpo``; the contract is the core's :mod:`dare.rl.objective`."""

from dare.rl import (
    LossTerms,
    OnlineRLObjective,
    PassLossInput,
    RLParams,
    SequenceLossInput,
    clipped_token_loss,
)
from dare_grpo.objectives.bgpo import BGPO
from dare_grpo.objectives.cj_grpo import CJGRPO
from dare_grpo.objectives.coupled_grpo import CoupledGRPO
from dare_grpo.objectives.d1 import D1
from dare_grpo.objectives.dtreerpo import DTreeRPO
from dare_grpo.objectives.ebpo import EBPO
from dare_grpo.objectives.dipo import DiPO
from dare_grpo.objectives.espo import ESPO
from dare_grpo.objectives.gdpo import GDPO
from dare_grpo.objectives.justgrpo import JustGRPO
from dare_grpo.objectives.lightningrl import LightningRL
from dare_grpo.objectives.mdpo import MDPO
from dare_grpo.objectives.spg import SPG
from dare_grpo.objectives.tracerl import TraceRL

__all__ = [
    "OnlineRLObjective",
    "RLParams",
    "PassLossInput",
    "SequenceLossInput",
    "LossTerms",
    "clipped_token_loss",
    "D1",
    "CoupledGRPO",
    "BGPO",
    "ESPO",
    "CJGRPO",
    "TraceRL",
    "MDPO",
    "SPG",
    "EBPO",
    "DTreeRPO",
    "JustGRPO",
    "GDPO",
    "DiPO",
    "LightningRL",
]

