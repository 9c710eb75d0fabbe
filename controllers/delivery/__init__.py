"""Model delivery in the worker (model-delivery spec §4.1, §4.4): the ModelArtifact controller
(resolution once, revalidation, the claim and image sources, the deletion finalizer, node counts),
and the NodeModelStore writer (one object per node running the plugin, its ``spec`` from Settings).
The pure decisions live beside the reconcilers; :mod:`.consumption` renders what a consuming Pod
needs, for the ModelDeployment and Instance renderers to call."""
