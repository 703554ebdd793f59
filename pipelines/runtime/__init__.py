"""What every pipeline stands on: runner options, the file layer, model directories.

``beam_options`` (the one ``PipelineOptions`` builder), ``paths`` (paths, local or URL,
through the file layer), ``object_store_files`` (Beam ``FileSystems`` as the ``lda_core``
file layer of URLs), ``model_dir`` (``open_model``:
a model directory or checkpoint with its checked vocabulary).
"""
