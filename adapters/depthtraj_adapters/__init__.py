"""Model-family adapters for depthtraj, one module per family.

Each adapter subclasses :class:`depthtraj.adapter.LoopedLMAdapter`, implements only the family
hooks (prelude, initial state, one recurrence step, readout path) and registers under the
``depthtraj.adapters`` entry-point group:

* ``huginn`` -> :class:`depthtraj_adapters.raven.HuginnAdapter` (raven family, Huginn-3.5B);
* ``recurrent-llama`` -> :class:`depthtraj_adapters.recurrent_llama.RecurrentLlamaAdapter`
  (raven lineage, Recurrent-Llama-1.4B from "retrofitted recurrence");
* ``ouro`` -> :class:`depthtraj_adapters.ouro.OuroAdapter` (Ouro family, Ouro-1.4B);
* ``layers`` -> :class:`depthtraj_adapters.layers.LayersAdapter` (any decoder-only causal LM
  transformers builds: depth = decoder layer, read through the logit or a tuned lens).

``depthtraj_adapters.tiny`` holds tiny random-weight models of each family, written from scratch,
for tests and benchmarks. Importing this package imports neither torch nor transformers.
"""

__all__: list[str] = []
