"""One hierarchy for every error the workbench raises.

Messages follow one pattern: "<thing> must <condition>, got <value>", then the fix.
The CLI turns any WorkbenchError into a one-paragraph message and exit code 2.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base of all errors a user can cause; the CLI prints these without a traceback."""


class ShapeError(WorkbenchError):
    """Shapes that do not match, or a size that cannot be proven divisible."""


class LayoutError(WorkbenchError):
    """Layouts (Local, Replicated, Sliced) or process groups that cannot be combined."""


class DTypeError(WorkbenchError):
    """An element type that an op does not accept."""


class VerifyError(WorkbenchError):
    """A program that breaks an IR invariant; the message shows the program around the op."""


class IllegalTransform(WorkbenchError):
    """A schedule transform whose preconditions do not hold; the message says which one."""


class ProgramFileError(WorkbenchError):
    """A program file that is missing, raises, or defines no program."""


class SizeError(WorkbenchError):
    """A size symbol that is not set, or set to a value the program cannot take."""


class HardwareError(WorkbenchError):
    """An unknown hardware preset or a malformed hardware profile."""


class RuntimeFault(WorkbenchError):
    """A failure on real GPUs: a rank that died or hung, a compile error, a wrong result."""


class NotOnThisCluster(WorkbenchError):
    """A schedule the modelled cluster cannot run (copy engines across nodes): `workbench
    simulate` leaves it out and says why."""
