"""pipelines: the Apache Beam pipelines (vectorize, train, infer, ...) and the `ldabeam` CLI.

The pipelines are thin compositions of ``lda_core``: composite ``PTransform``s whose DoFns call
the core's local steps, a ``CombineFn`` that sums statistics, and drivers that apply the core's
global step between windows.
"""
from pipelines.runtime import object_store_files

# every path of the pipelines, local or a URL, goes through lda_core's file layer: URLs
# through Beam's FileSystems (the layer imports Beam only when a URL is used)
object_store_files.register()
