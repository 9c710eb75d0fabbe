"""Talking to Kubernetes: the REST client over the official client (:mod:`.client`), the resource
table (:mod:`.resources`), informer caches (:mod:`.informer`), the work queue (:mod:`.workqueue`),
leader election on a Lease (:mod:`.leader`), events (:mod:`.events`), watch filters
(:mod:`.changes`) and the controller manager that ties them together (:mod:`.manager`).

Webhooks, certificates, controllers and both node agents import it; it imports nothing of ours
but ``api``.
"""
