"""The ``hat`` command line (one typer app; each command is a thin shell over the library)."""
