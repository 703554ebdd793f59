"""Third-party log records that do not concern a user of ``ldabeam``, dropped at the handlers
the command line sets up (:func:`install`).

* Beam's ``apitools not found, and bigquery client libraries are not available ...``
  (a root-logger warning when ``apache_beam.io.gcp`` is imported without the GCP extras):
  every ``vectorize``, ``infer`` and ``report`` printed it, whatever the input; a BigQuery
  input that needs those libraries fails with its own error;
* numexpr's ``NumExpr defaulting to N threads`` (an INFO line when pandas, imported by Beam,
  loads it).
"""
from __future__ import annotations

import logging

# (logger name, start of the message) of the records dropped
IGNORED = (
    ("root", "apitools not found"),
    ("numexpr.utils", "NumExpr defaulting to"),
)


class ThirdPartyFilter(logging.Filter):
    """Drops the records of :data:`IGNORED`."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, prefix in IGNORED:
            if record.name == name and str(record.msg).startswith(prefix):
                return False
        return True


def install(logger: logging.Logger = None) -> None:
    """Add the filter to every handler of ``logger`` (the root logger by default), once."""
    logger = logger or logging.getLogger()
    for h in logger.handlers:
        if not any(isinstance(f, ThirdPartyFilter) for f in h.filters):
            h.addFilter(ThirdPartyFilter())
