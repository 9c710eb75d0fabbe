"""Settings as reconcilers read them: from the watch cache of ``Setting`` objects in the system
namespace, per reconcile (§10: the ``node-*``/``instance-type-*`` ones are read every reconcile and
a change wakes nothing by itself — controllers that want a prompt reaction watch ``Setting``).

A setting with no stored object, or one whose ``spec.value`` is not a boolean (for
:meth:`SettingsReader.enabled`) or refused by its validator (for :meth:`SettingsReader.valid`),
reads as its registered default. :meth:`SettingsReader.image` reads an image Setting as the
operator runs it: under the ``container-*`` Settings, as the chart's own images are under
``global.imageRegistry``/``global.imageNamespace``."""

from __future__ import annotations

from api import constants, images, setting_names
from api.booleans import parse_bool
from api.settings import definition
from kube.informer import Informer

MIXED_ON_NODE = setting_names.INSTANCE_TYPE_MIXED_ON_NODE
DERIVED_FROM_NODE = setting_names.INSTANCE_TYPE_DERIVED_FROM_NODE
DRAIN_WHEN_NO_FLAVORS = setting_names.INSTANCE_TYPE_DRAIN_WHEN_NO_FLAVORS
AWARE_CPU = setting_names.INSTANCE_TYPE_AWARE_CPU_MANUFACTURER
PROFILE_CHANGE_STOP_POLICY = setting_names.TOPOLOGY_PROFILE_CHANGE_STOP_POLICY


class SettingsReader:
    def __init__(self, informer: Informer) -> None:
        self.informer = informer

    def value(self, name: str) -> str:
        obj = self.informer.get(name, constants.SYSTEM_NAMESPACE)
        value = ((obj or {}).get("spec") or {}).get("value")
        return value if isinstance(value, str) else definition(name).default

    def enabled(self, name: str) -> bool:
        try:
            return parse_bool(self.value(name))
        except ValueError:
            return parse_bool(definition(name).default)

    def image(self, name: str) -> str:
        """The image the Setting ``name`` names, rewritten by ``container-namespace`` and
        ``container-registry`` (api/images.py) as the chart's ``global.imageNamespace`` and
        ``global.imageRegistry`` rewrite its own; a blank Setting stays blank."""
        reference = self.value(name)
        if not reference:
            return reference
        return images.rewrite(
            reference,
            registry=self.valid(images.SETTING_CONTAINER_REGISTRY),
            namespace=self.value(images.SETTING_CONTAINER_NAMESPACE),
        )

    def valid(self, name: str) -> str:
        """The stored value when the setting's own validator accepts it, else the default."""
        value = self.value(name)
        return value if definition(name).validator(value) is None else definition(name).default
