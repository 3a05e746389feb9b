"""`python -m workbench ...`: the same as the `workbench` command."""

from workbench.cli.main import run

run()
