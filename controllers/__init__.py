"""Controllers: reconcilers in one package per feature, each a thin loop over pure planners that
live beside it, on the ``kube`` runtime (informers, work queue, leader election).

:mod:`controllers.registry` lists every controller the worker runs; a controller needs no other
registration.
"""
