"""The Cython extension list, and nothing else: metadata lives in pyproject.toml.

Every module under fastpath/ except the package files is compiled from its pure-Python source
(Cython's pure-Python mode, typed by annotations and an optional augmenting .pxd).  The same .py
stays importable uncompiled through fastpath.pure for differential tests.
"""

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
NOT_COMPILED = {"__init__.py", "pure.py"}

extensions = [
    Extension(f"fastpath.{src.stem}", [str(src.relative_to(HERE))], extra_compile_args=["-O2"])
    for src in sorted((HERE / "fastpath").glob("*.py"))
    if src.name not in NOT_COMPILED
]

# scripts/bootstrap.sh builds the extensions once, in place and cached (GPUSTACK_NO_EXTENSIONS=1 keeps
# pip's editable install from compiling them a second time in its own build directory).
setup(
    ext_modules=[]
    if os.environ.get("GPUSTACK_NO_EXTENSIONS") == "1"
    else cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            # Python semantics everywhere (negative indices, floor division) so the compiled
            # and the interpreted module answer alike; a module may opt out in its header.
            "embedsignature": True,
        },
        quiet=True,
    )
)
