"""GPU Instances (instances spec part A): the Instance controller with its pure Pod, Service and
status renderers, and the controllers behind the companion kinds (SSH keys, image pull secrets,
persistent volumes).

- :mod:`.reconciler` — ``InstanceReconciler``: finalizer, stop/start, the StopPolicy rule, the Pod,
  the NodePort Service, the status;
- :mod:`.pod`, :mod:`.resources`, :mod:`.service`, :mod:`.status`, :mod:`.claims`,
  :mod:`.lifecycle` — pure renderers and decisions; :mod:`.facts` reads what a Pod depends on;
- :mod:`.companions` (pure) and :mod:`.backing` — each companion object's core object.
"""
