"""One module per `ldabeam` subcommand; each defines ``add_arguments(parser)`` and
``run(args, beam_argv) -> int``. ``pipelines.cli`` registers them."""
