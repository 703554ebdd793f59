"""The LDA algorithms, each with its kernels and statistics, and the interfaces they implement.

``algorithm`` holds the two interfaces -- ``StochasticAlgorithm`` (``local_step`` with the
global state frozen, ``global_step`` on the merged ``SuffStats``) and ``SequentialSampler``
(``process`` in stream order) -- the capability flags and the ``ALGORITHMS`` registry.
``params`` is the one parameter validator of every constructor. The algorithms: online and
batch VB (``online_vb``, ``estep_vb``, ``vb_stats``, ``vb_lazy_lambda``, ``vb_exp_elog_beta``,
``vb_digamma``, ``vb_gamma_init``), SCVB0 (``scvb0``, ``scvb0_kernel``),
sparse Gibbs-within-VB (``sparse_gibbs_vb``, ``sparse_gibbs_kernel``, ``sparse_stats``),
collapsed Gibbs (``gibbs``, ``gibbs_kernel``), o-LDA and incremental Gibbs
(``online_samplers``), the particle filter (``particle_filter``, ``particle_tree``).
"""
