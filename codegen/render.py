"""The one jinja2 Environment that turns KernelSpecs into CUDA C++ (templates in
codegen/cuda/templates, device helpers in codegen/cuda/include: package data, in the wheel too).
Rendering is pure: it never compiles or launches."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from importlib.resources import files
from pathlib import Path

from codegen.spec import THREADS, KernelSpec
from workbench.errors import RuntimeFault

# A real folder on disk (nvcc reads the headers by path): setuptools installs package data as
# plain files, so the resource path is one.
CUDA_DIR = Path(str(files("codegen") / "cuda"))


def cuda_dir() -> Path:
    """The CUDA sources' folder (templates and headers), with a clear error if missing."""
    if not (CUDA_DIR / "templates").is_dir() or not (CUDA_DIR / "include").is_dir():
        raise RuntimeFault(f"codegen/cuda must hold templates/ and include/, got none at "
                           f"{CUDA_DIR}; reinstall the package (the wheel ships them as package "
                           "data)")
    return CUDA_DIR


def include_dir() -> Path:
    """Folder of the hand-written device helpers (pass to nvcc as -I)."""
    return cuda_dir() / "include"


@cache
def environment():
    """The jinja2 Environment: StrictUndefined, no autoescape, trim_blocks, lstrip_blocks."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(cuda_dir() / "templates")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(spec: KernelSpec) -> str:
    """CUDA C++ source of one kernel (one translation unit, `extern "C"` entry = spec.name)."""
    spec = replace(spec, comment=comment_text(spec.comment))
    return environment().get_template(spec.template).render(spec=spec, threads=THREADS)


# What ends or continues a `//` comment line: line breaks of any kind (C and Unicode), and
# a backslash (a trailing one splices the next line into the comment).
_NOT_IN_COMMENT = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029\\]")


def comment_text(text: str) -> str:
    """`text` (which names statements and values) safe on one `//` line: line breaks,
    control characters and backslashes become `?`, so no name can put code into the source."""
    return _NOT_IN_COMMENT.sub("?", text)
