"""depthtraj: trajectory stores for depth-recurrent language models.

The package is the contract (``depthtraj.models``), the store I/O (``depthtraj.store``),
the validator (``depthtraj.validate``), the adapter protocol (``depthtraj.adapter``) and the
analyses of *Prediction Dynamics in Depth-Recurrent Language Models* (``depthtraj.analysis``).
Heavy dependencies (torch, transformers, dask.distributed) are imported lazily.
"""

__version__ = "0.1.0"

FORMAT_VERSION = "1.4.0"
"""The newest trajectory-store format version this release reads and writes (``spec/v1``); each
store declares the oldest version its content needs (``depthtraj.models.v1.content_version``)."""

DOCS_URL = f"https://depthtraj.readthedocs.io/en/v{__version__}/"
"""The documentation site of this release (``mkdocs.yml``; built by ``make docs``). The
validator's findings link the rule they break on its rules page (``DEPTHTRAJ_DOCS_URL``
points them at another copy of the site, e.g. a local build)."""

__all__ = ["DOCS_URL", "FORMAT_VERSION", "__version__"]
