"""What DARE writes for people to read: a run's report and plot, what a report keeps of an earlier command, the
comparison of runs (``dare compare``, the end of ``dare sweep``) with its statistics, and a trained model's card.

* :mod:`dare.report.report`: ``report.{json,md}`` and the provenance of results;
* :mod:`dare.report.merge`: what a report keeps from an earlier command of the same run directory;
* :mod:`dare.report.plots`, :mod:`dare.report.plotstyle`: ``plot.png``, the ``metrics.jsonl`` readers, shared styling;
* :mod:`dare.report.compare`, :mod:`dare.report.groups`: ``dare compare`` and its groups over seeds;
* :mod:`dare.report.stats`: t-intervals, paired t-tests with Holm's correction, power, bootstrap, IQM;
* :mod:`dare.report.modelcard`: ``model/README.md``, the Hugging Face model card of a trained model.
"""
