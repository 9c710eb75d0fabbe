"""Hot paths of admission and allocation, compiled by Cython from pure-Python sources.

Importing ``fastpath.<module>`` loads the compiled extension when it was built (``pip install -e .``
builds them in place); ``fastpath.pure.load("<module>")`` loads the same source uninterpreted, for
differential tests and benchmarks.
"""
