"""What the tests share, so that no test file imports another (each module says what it holds).

* ``paths``      the repository, the real corpora of ../shared/data (skip when absent), the
                 bundled sample
* ``uci``        the UCI bag-of-words corpora (KOS, NIPS): one reader, every shape the tests
                 use (triples, rows, DocBatch, CSR, dataset folders, shard lists, file slices)
* ``news20``     20 Newsgroups posts (one reader of the tar), ``reuters`` Reuters-21578 bodies
* ``planted``    corpora drawn from planted topics, and topic matching
* ``datasets``   dataset folders (shards, vocabulary, manifest) written from a DocBatch
* ``cli``        the ``ldabeam`` command line run in this process (exit code, output)
* ``warm``       child processes forked from one warm interpreter (``warm_server.py``,
                 ``warm_client.py`` for shell shims)
* ``procs``      signals of child processes, services on free ports (Beam's job service)
* ``trainers``   the in-process and Beam trainers driven directly, Beam runner options
* ``bits``       bit-for-bit comparison of states and algorithms, relative differences
* ``fake_object_store``  the ``fakegs://`` scheme of the object-store tests
* ``bench``      the benchmark harness of ../shared/bench as a module
* ``streams``    what the streaming tests share (a state cell, a file route job)
"""
