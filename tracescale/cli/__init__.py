"""Command-line interface: one module per subcommand, a thin layer over the public API."""
