"""``gpustack-operator worker-gateway``: the read-only fleet view over many clusters.

The GPUStack server (or anyone in front of several Kubernetes clusters) subscribes clusters; the
gateway checks each one's operator API, watches the operator's kinds there, and serves them back
per cluster, and InstanceTypes and InstanceTypeFlavors also folded into one fleet view
(``fleet``, ``flavors``), over HTTPS on a unix socket (or TCP).  It never writes to a cluster.
"""
