"""Gate 3 and the per-card fit labels (devices spec §6.3, §6.6): the ``gpustack-node-devices``
AdmissionCheck controller (:mod:`.check`) over its pure decision (:mod:`.fit`), and the fit-label
reconciler (:mod:`.fit_labels`) computed with the same per-card predicates.
"""
