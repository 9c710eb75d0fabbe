"""The domain vocabulary shared by every part of gpustack-operator.

``api.constants`` names every label, annotation, finalizer, condition and reason once;
``api.manufacturers`` holds the accelerator manufacturer table and the resource-key grammar;
``api.models`` holds pydantic models of every custom resource; ``api.crds`` generates CRDs from them.
"""

GROUP = "worker.gpustack.ai"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
SETTINGS_GROUP = "gpustack.ai"
SETTINGS_API_VERSION = f"{SETTINGS_GROUP}/v1"
CATEGORY = "gpustack"
OPERATOR_VERSION = "0.1.0"  # what every component reports as its version
