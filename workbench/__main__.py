"""`python -m workbench ...`: the same as the `workbench` command."""

from workbench.cli.entry import run

run()
