"""The ModelDeployment feature (model-deployment.md §7–§11): pure renderers, one concern a module —
``names``, ``labels`` (and the hash), ``render`` (the Pod spec), ``ports`` (ports and probes),
``resources``, ``image`` (the runner image), ``pairing`` (prefill/decode and the direct decoder),
``kvevents`` (the publisher and reserved ports), ``services`` — the planner (``replicas``, ``plan``,
``passes``: one pass, purely), ``status``, ``departures``, and two controllers:
``controller.ModelDeploymentReconciler`` (its writes in ``members``: Pods and Workloads, ``fronts``:
Services and the router, ``reports``: events once, ``teardown``: the finalizer; ``features``: the
features wired in) and ``joint.JointAdmissionCheck``.  ``extensions`` is where the KV cache, model
delivery and topology features plug into the renderer.
"""
