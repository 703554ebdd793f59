"""Ingest: raw text or bags of words -> a vocabulary and Parquet shards.

Readers (``input_files``, ``text_sources``, ``wiki_source``, ``bow_sources`` with
``bow_triples``, ``table_sources``, ``bigquery_source``), the tokenizer (``tokenize``), the
vocabulary (``vocabulary``), the ``vectorize`` pipeline (``vectorize``, ``vectorize_steps``,
``vectorize_bow``, ``vectorize_output``), the dataset's layout and shards (``dataset``), its
manifest and the verification of every shard read (``manifest``), the held-out split
(``splits``), the seeded
document sample topic health is measured on (``doc_sample``) and synthetic corpora
(``synthetic``). Training only ever reads shards.
"""
