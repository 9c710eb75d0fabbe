"""The model-manager CSI node plugin (model-delivery spec §4.5-§4.7).

It materializes each manifest digest once per node — one background attempt per digest that
concurrent mounts join, downloads under a node-wide request limit and byte-rate bucket, parallel
byte ranges with resume from the last verified byte, verification while streaming, atomic
publication with a marker — mounts the published tree read-only into every authorized Pod, keeps the
node's ``NodeModelStore`` status and collects unused trees by watermark.

On-disk layout under the cache root (spec §8 leaves it open; see :mod:`.layout`).
"""
