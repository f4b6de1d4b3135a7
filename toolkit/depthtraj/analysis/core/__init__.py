"""The shared lower layer of the analyses: what every section and the engine stand on.

* :mod:`.data`: opening a store as the analyses read it (admission, canonical chunks,
  :func:`~.data.score_of`);
* :mod:`.grid`: candidate depth sets 𝒯 and the endpoint T;
* :mod:`.inputs`: readouts, normalisations and question selections;
* :mod:`.questions`: per-question columns (K, A_q, label, ids, cell keys) read chunk by chunk;
* :mod:`.arrangements`, :mod:`.chunks`, :mod:`.cells`: arrangement weights, chunk plumbing,
  cells and per-cell sums;
* :mod:`.elementary`: branch-free compiled exp/log;
* :mod:`.bootstrap`: the paired whole-question Poisson bootstrap;
* :mod:`.scheduler`: the dask scheduler of a command (``--scheduler``);
* :mod:`.tables`: tables and their renderers.

Nothing here imports a section (:mod:`depthtraj.analysis.geometry`, ...) or the engine.
"""
