"""The `workbench` command line: the commands, the comparator, reports and sweeps (the top floor:
the only code that imports the simulator, codegen, the runtime and the studies together)."""
