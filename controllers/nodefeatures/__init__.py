"""The worker's side of node discovery (§2.0, D.4/D.5): its NodeFeature per node and the
``gpustack-cpu-info`` NodeFeatureRule, both turned into node labels/annotations by nfd-master."""
