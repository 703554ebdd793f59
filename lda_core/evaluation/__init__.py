"""Evaluation of trained topics: held-out likelihood estimates and topic-quality metrics.

``metrics`` (document completion, left-to-right, every metric in one namespace),
``topic_quality`` (coherence, NPMI, diversity, topic usage and health).
"""
