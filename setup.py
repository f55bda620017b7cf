"""The one compiled part: SimHash's arithmetic (udfs/core/_simhash.c). Everything else
is in pyproject.toml. Optional: where it cannot be built, fingerprints.py uses NumPy."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("udfs.core._simhash", ["udfs/core/_simhash.c"],
                             extra_compile_args=["-O3", "-funroll-loops"], optional=True)])
