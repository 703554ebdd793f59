"""What training leaves on disk: the topic state, checkpoints, leases and the run log.

``state`` (``TopicState`` and its data-only file format), ``files`` (the file layer:
``LocalFiles`` and the registry of URL-scheme layers), ``npy`` (the ``.npy`` format),
``vocab_file`` (``vocab.tsv`` and ``Vocabulary``), ``checkpoint`` (``CheckpointStore``: atomic publish, ``LATEST``), ``lease`` (one writer per
model directory), ``run_log`` (the JSON-lines training log), ``traffic`` (the bytes a process
moves, per step, and the bandwidth throttle).
"""
