"""lda_core: the LDA algorithms and the topic state, as plain numpy/scipy/numba code.

No Apache Beam import anywhere in this package: every runner (the in-process trainer, the Beam
pipelines) drives the same two halves of each algorithm — a *local step* over a batch of
documents with the global state frozen, and a *global step* that applies the summed
statistics. The only I/O here is the topic state's own file format (``lda_core.storage.state``).
"""

__version__ = "0.1.0"

from lda_core.docbatch import DocBatch  # noqa: E402,F401
