"""Training: the one session every runner shares, and the in-process runner.

``session`` owns the position, the validation of every step, evaluation cadence, the
checkpoint stamp, the run-log records and the one error type; ``trainer`` is the in-process
loop (``in_memory``: the library's callers with documents in memory); ``ordering`` the seeded
minibatch order; ``schedules`` the learning rates.
"""
