"""The scheduling chain's pools (devices spec §8, gates 2 and 4): from managed Nodes to
ResourceFlavors, Topologies, InstanceTypes, ClusterQueues and LocalQueues, plus the node counting
keys and the ``Devices`` label sync.

Each reconciler is a thin module over a pure planner beside it: :mod:`.render` (flavor groups,
flavors, derived InstanceTypes, LocalQueues), :mod:`.queue_plan` (the ClusterQueue),
:mod:`.instance_type_status` (phase and the four views), :mod:`.node_capacity` (counting keys).
"""
