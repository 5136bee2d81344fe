# The one thing pyproject.toml cannot say: the optional C module of the recall index.
# Where no C compiler is found, Eva installs without it and gathers postings in Python.
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "eva.core._postings",
            sources=["eva/core/_postings.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
