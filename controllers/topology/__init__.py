"""Topology (topology spec B.1-B.5): TopologySources read and published (:mod:`.sources` over
:mod:`.source_plan`, :mod:`.snapshot`, :mod:`.fetch`), each Node's profile (:mod:`.node_profiles`
over :mod:`.profiles` and :mod:`.hierarchy`), and the ModelDeployment's required level
(:mod:`.required_level`).  Topologies, profile-pinned flavors and the queue plan's
``TopologyReady`` are the pool reconcilers' (``controllers.pools``)."""
