"""ldabeam: online LDA topic models as a Python library.

The public face of the two packages the distribution installs (``lda_core``, the algorithms
with no Beam import; ``pipelines``, the Beam pipelines and the ``ldabeam`` command)::

    import ldabeam
    model = ldabeam.load("model/")          # what `ldabeam train --output model/` wrote
    model = ldabeam.train(texts, "model/", topics=20)   # or vectorize + train in Python
    theta = model.transform(["some text", ...])    # (n, K), the θ `ldabeam infer` writes
    model.top_words(10)
    model.update(new_texts, passes=1, grow_vocab=True)
    model.save("model/")                    # a new checkpoint; every command reads it

``ldabeam.OnlineLDA`` and ``ldabeam.SCVB0LDA`` are the scikit-learn estimators
(:mod:`lda_core.sklearn_api`); their ``save`` / ``load`` use the same directory format.
The Beam transforms (``Vectorize``, ``InferTopics``, ``LdaModelHandler`` for
``RunInference``) are in :mod:`ldabeam.beam`, imported on demand. docs/library.md walks
through all of it.
"""
from lda_core import __version__  # noqa: F401
from lda_core.errors import (DataIntegrityError, InputError, LdaBeamError,  # noqa: F401
                             OutputError, ResourceError, TrainingError, UsageError, UserError)
from lda_core.sklearn_api import OnlineLDA, SCVB0LDA  # noqa: F401
from ldabeam.model import LdaModel, load  # noqa: F401
from ldabeam.training import train  # noqa: F401

__all__ = ["load", "train", "LdaModel", "OnlineLDA", "SCVB0LDA", "LdaBeamError", "UserError",
           "UsageError", "InputError", "DataIntegrityError", "OutputError", "ResourceError",
           "TrainingError", "__version__"]
