"""Training on shards: the Beam driver and its transforms, and the in-process minibatch source.

``beam_train`` (the driver: windows, ``after_window``), ``beam_chain`` (worker processes
keeping their own copy of the state, one stage per step), ``beam_cost`` (per-phase step
costs), ``beam_plan`` (rows of each
minibatch piece), ``beam_steps`` (DoFns and composite transforms), ``beam_window`` (one
window's pipeline), ``beam_stats`` (the ``CombineFn`` and statistics coder), ``beam_state``
(frozen states in workers, scratch folders), ``beam_detached`` and ``detached``
(``--detach``), ``beam_sequential`` (stream-order samplers), ``shard_stream`` (shards for the
in-process trainer), ``algorithm_options`` (command-line settings -> algorithm).
"""
