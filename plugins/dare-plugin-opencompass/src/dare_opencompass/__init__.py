"""DARE models in OpenCompass (docs/evaluation.md, "OpenCompass").

* :class:`~dare_opencompass.models.DareModel`: a DARE model/run directory + any DARE sampler as an OpenCompass model;
* :class:`~dare_opencompass.data.DareBenchmarkDataset`: a DARE benchmark's rows and prompts as an OpenCompass dataset;
* :class:`~dare_opencompass.evaluators.DareRewardEvaluator`: OpenCompass predictions scored by the DARE reward.

The OpenCompass-independent part (loading, sampler settings, ``max_out_len`` rules, ELBO scoring) is
:class:`dare_opencompass.engine.DareEngine`.
"""

from dare_opencompass.data import DareBenchmarkDataset
from dare_opencompass.evaluators import DareRewardEvaluator
from dare_opencompass.models import DareModel

__all__ = ["DareModel", "DareBenchmarkDataset", "DareRewardEvaluator"]
