"""Pydantic models of every custom resource the operator serves.

Group ``worker.gpustack.ai`` at ``v1`` (and ``Setting`` in ``gpustack.ai/v1``), one module per kind or
family of kinds. The JSON shape follows the reference implementation's Go API types; each module's
docstring names the Go file it follows and any deliberate difference.

``api.models.registry`` holds what spans the kinds:

- ``KINDS`` maps ``(apiVersion, kind)`` to the model class; each class carries its CRD identity,
  scope, names and printer columns in ``__crd__``.
- ``parse(document)`` validates a manifest into its model or raises ``ManifestError`` with
  ``(field_path, message)`` pairs.
- ``dump(model)`` serialises a model back to a manifest as the Go types would.

This package imports none of its modules: import the one you need. Building every kind's models
costs about 0.25 CPU-seconds, and a process that reads one kind (the device manager reads
``Devices``) should not pay for the others.
"""
