"""Training: the one session every runner shares, and the in-process runner.

``session`` owns the position, the validation of every step, evaluation cadence, the
checkpoint stamp, the run-log records and the one error type; ``trainer`` is the in-process
loop; ``ordering`` the seeded minibatch order; ``schedules`` the learning rates; ``faults``
the named crash points of the fault-injection tests.
"""
