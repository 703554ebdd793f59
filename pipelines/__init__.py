"""pipelines: the Apache Beam pipelines (vectorize, train, infer, ...) and the `ldabeam` CLI.

The pipelines are thin compositions of ``lda_core``: composite ``PTransform``s whose DoFns call
the core's local steps, a ``CombineFn`` that sums statistics, and drivers that apply the core's
global step between windows.
"""
