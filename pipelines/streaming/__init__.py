"""Streaming training: documents from an unbounded source, one global step per window.

``stream`` (``StreamTrain``: windowing, dead letters, the local directory driver),
``stream_parse`` (JSON messages -> bags of words or dead letters; a window -> a DocBatch),
``stream_step`` (the E-step against the newest checkpoint and the stateful global step).
"""
