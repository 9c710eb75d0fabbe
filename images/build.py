"""Build the project's container images here: no registry, no Docker, no podman.

Each image is a root filesystem made of layers the project already has the makings of, packed as an
OCI image archive with ``umoci``:

    base     Debian bookworm (``mmdebstrap --variant=minbase``) with the packages the image needs
    deps     the runtime dependencies, installed from the wheelhouse ``scripts/bootstrap.sh`` keeps
             (``pip install --target``: the image's Python 3.11 reads the same cp311 wheels)
    app      the project's packages as this checkout has them (its Cython extensions compiled by
             bootstrap, its gRPC modules generated), and the chart under /etc/gpustack/charts
    binaries the Go builds of tests/cluster (Kueue, NFD), with the C libraries a binary links

Images (``IMAGES``; names are the chart's defaults):

    operator     gpustack/gpustack-operator-py:v<version>  worker, device manager, model manager,
                 cleanup and worker-gateway: one image, ``gpustack-operator <subcommand>``
    ssh-server   gpustack/gpustack-operator-py-ssh-server:v<version>  the Instance sshd sidecar
    engine       gpustack/gpustack-operator-py-engine:v<version>  the stand-in engine (standin/)
    router       gpustack/gpustack-operator-py-router:v<version>  the stand-in ``vllm-router``
                 (standin/router.py): the engine's layers and a ``vllm-router`` program
    mooncake     gpustack/gpustack-operator-py-mooncake:<store version>-cpu  a managed KVCacheBackend's
                 leader and members: the Mooncake wheel ``scripts/ensure-mooncake.sh`` installs (its
                 venv's site-packages, aiohttp included), Debian's libibverbs1 and the libraries the
                 binaries link; ``mooncake_master``, ``mooncake_client`` and ``mc_store_rest_server``
                 on PATH, each under ``tini`` (PID 1 forwards SIGTERM), as the renderer calls them
    pause        registry.k8s.io/pause:3.10  the sandbox image of the local containerd nodes
                 (busybox-static), under the name containerd asks for
    kueue        registry.k8s.io/kueue/kueue:v<its version>  Kueue's manager, the binary the local
                 cluster builds from its Go module, under the name the chart dependency runs
    nfd          registry.k8s.io/nfd/node-feature-discovery:v<its version>  nfd-master, nfd-worker
                 and nfd-gc, likewise
    ubuntu       docker.io/library/ubuntu:24.04  what the examples' Pod and Instance run: Ubuntu noble
                 (``mmdebstrap --variant=minbase`` from archive.ubuntu.com, the archive's keyring
                 checked against the hash pinned here), under the name a registry pull would give;
                 no registry is reachable from this machine, its Ubuntu archive is

Every layer and every image is cached under ``~/.cache/gpustack-operator/images/`` by the hash of
what goes into it, so a second build is a few hashes. Usage::

    .venv/bin/python images/build.py                 # all but ON_REQUEST; prints "<name> <ref> <archive>" lines
    .venv/bin/python images/build.py operator --ref  # only print what it would name

``build(name)`` returns the same (ref, archive) for the test harness. A build that cannot run says in
one line what is missing (a tool, a Debian package, the wheelhouse) and exits 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE_ROOT = Path(os.environ.get("GPUSTACK_CACHE", Path.home() / ".cache" / "gpustack-operator"))
CACHE = CACHE_ROOT / "images"
FORMAT = "1"  # bump when the way layers are made changes
SUITE = "bookworm"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
PACKAGES = ("api", "fastpath", "kube", "modelhub", "readmodels", "webhooks", "controllers", "nodeplugins", "certs",
            "gateway", "gpustack_operator")  # fmt: skip
SITE = "/opt/gpustack"
MOONCAKE_SITE = "/opt/mooncake/lib"
TOOLS = {"mmdebstrap": "mmdebstrap", "umoci": "umoci", "busybox": "busybox-static"}  # tool -> Debian package


class BuildError(Exception):
    """One line naming what is missing or what failed."""


@dataclass(frozen=True)
class Image:
    name: str
    ref: str
    config: dict  # umoci config flags
    layers: Callable[[Image], list[Path]]  # builds (or finds cached) the layers, bottom first
    debian: tuple[str, ...] = ()  # packages of a Debian base layer


def _versions(script: str) -> dict[str, str]:
    """versions.env of the directory a tests/cluster build script prints (no build: the binaries
    must be there, as they are after `make cluster-binaries`)."""
    directory = _bin_dir(script)
    env = directory / "versions.env"
    if not env.exists():
        return {}
    return dict(line.split("=", 1) for line in env.read_text().splitlines() if "=" in line)


def _bin_dir(script: str) -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "tests" / "cluster" / script), "--bin-dir"], capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def module_version(directory: str, module: str) -> str:
    """The version tests/cluster/<directory>/go.mod pins ``module`` at (what its binaries are built from)."""
    text = (REPO / "tests" / "cluster" / directory / "go.mod").read_text()
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", text, re.MULTILINE)
    if found is None:
        raise BuildError(f"tests/cluster/{directory}/go.mod pins no {module}")
    return found.group(1)


def _tag(image: Image) -> str:
    return image.ref.rsplit(":", 1)[1]


def _python_layers(image: Image) -> list[Path]:
    return [_base_layer(image), _deps_layer(), _app_layer()]


def _engine_layers(image: Image) -> list[Path]:
    return [_base_layer(image), _deps_layer(), _standin_layer()]


def _router_layers(image: Image) -> list[Path]:
    return [_base_layer(image), _deps_layer(), _standin_layer(), _programs_layer("router", ROUTER_PROGRAMS)]


def _ssh_layers(image: Image) -> list[Path]:
    return [_base_layer(image), _ssh_layer()]


def _mooncake_layers(image: Image) -> list[Path]:
    return [
        _base_layer(image),
        _mooncake_layer(),
        _files_layer("lease-master", LEASE_MASTER_FILES, f"{SITE}/engine"),
    ]


def _ubuntu_layers(image: Image) -> list[Path]:
    return [_ubuntu_layer()]


def _pause_layers(image: Image) -> list[Path]:
    return [_busybox_layer()]


def _go_layers(script: str, variable: str, files: dict[str, str]) -> Callable[[Image], list[Path]]:
    """Layers of Go binaries ``build <script>`` made (``files``: path in the image -> binary name), once
    its versions.env says they are the version the image names."""

    def layers(image: Image) -> list[Path]:
        built = _versions(script).get(variable)
        if built != _tag(image):
            raise BuildError(
                f"{image.name}: the binaries tests/cluster/{script} built are {built}, the image names {_tag(image)}"
            )
        directory = _bin_dir(script)
        return [_binaries_layer(image.name, {dest: directory / binary for dest, binary in files.items()})]

    return layers


def mooncake_version() -> str:
    """The store version scripts/ensure-mooncake.sh installs (the default backend image's store)."""
    text = (REPO / "scripts" / "ensure-mooncake.sh").read_text()
    found = re.search(r"GPUSTACK_MOONCAKE_VERSION:-([^}]+)}", text)
    if found is None:
        raise BuildError("scripts/ensure-mooncake.sh names no GPUSTACK_MOONCAKE_VERSION default")
    return os.environ.get("GPUSTACK_MOONCAKE_VERSION") or found.group(1)


KUEUE_VERSION = module_version("kueue", "sigs.k8s.io/kueue")
# What the wheel's binaries and extensions link beyond libc (as scripts/ensure-mooncake.sh finds them:
# libibverbs1 and its libnl even for TCP), Python for the member program, tini for PID 1.
MOONCAKE_DEBIAN = ("python3", "ca-certificates", "tini", "libibverbs1", "libnl-3-200", "libnl-route-3-200",
                   "libcurl4", "libnuma1", "libstdc++6")  # fmt: skip
NFD_VERSION = module_version("nfd", "sigs.k8s.io/node-feature-discovery")

IMAGES = {
    "operator": Image(
        "operator",
        f"docker.io/gpustack/gpustack-operator-py:v{VERSION}",
        {
            "user": "65532",
            "entrypoint": ["/usr/local/bin/gpustack-operator"],
            "cmd": ["worker"],
            "env": ["PYTHONUNBUFFERED=1", f"PYTHONPATH={SITE}/app:{SITE}/lib", "PYTHONDONTWRITEBYTECODE=1"],
        },
        _python_layers,
        ("python3", "ca-certificates", "util-linux", "mount", "iproute2", "kmod"),
    ),
    # The stand-in engine (standin/): answers to the engines' own programs, so the command lines the
    # controller renders start it unchanged. Root, as the engines' images run.
    "engine": Image(
        "engine",
        f"docker.io/gpustack/gpustack-operator-py-engine:v{VERSION}",
        {
            "user": "0",
            "entrypoint": [],
            "cmd": ["vllm", "serve", "--help"],
            "env": [
                "PYTHONUNBUFFERED=1",
                f"PYTHONPATH={SITE}/engine:{SITE}/lib",
                "PYTHONDONTWRITEBYTECODE=1",
                "PATH=/usr/local/bin:/usr/bin:/bin",
            ],
        },
        _engine_layers,
        ("python3", "ca-certificates", "util-linux", "mount", "iproute2", "kmod"),  # the operator's base
    ),
    # The stand-in router: `vllm-router` with the command line the controller renders (non-root, as
    # a router needs nothing of the host). The engine's base, so its layers are shared.
    "router": Image(
        "router",
        f"docker.io/gpustack/gpustack-operator-py-router:v{VERSION}",
        {
            "user": "65532",
            "entrypoint": [],
            "cmd": ["vllm-router", "--help"],
            "env": [
                "PYTHONUNBUFFERED=1",
                f"PYTHONPATH={SITE}/engine:{SITE}/lib",
                "PYTHONDONTWRITEBYTECODE=1",
                "PATH=/usr/local/bin:/usr/bin:/bin",
            ],
        },
        _router_layers,
        ("python3", "ca-certificates", "util-linux", "mount", "iproute2", "kmod"),  # the engine's base
    ),
    "ssh-server": Image(
        "ssh-server",
        f"docker.io/gpustack/gpustack-operator-py-ssh-server:v{VERSION}",
        {"user": "0", "entrypoint": ["/usr/local/bin/entrypoint"], "cmd": [], "env": []},
        _ssh_layers,
        ("openssh-server", "util-linux"),
    ),
    # A managed KVCacheBackend's leader and members (controllers/kvcache/*_render.py): the programs
    # the rendered command lines name, from the wheel the store tests run. Root, as the store's
    # own images run (a tier's directory on the host belongs to root).
    "mooncake": Image(
        "mooncake",
        f"docker.io/gpustack/gpustack-operator-py-mooncake:{mooncake_version()}-cpu",
        {
            "user": "0",
            "entrypoint": [],
            "cmd": ["mooncake_master", "--help"],
            "env": [
                "PYTHONUNBUFFERED=1",
                f"PYTHONPATH={MOONCAKE_SITE}",
                "PYTHONDONTWRITEBYTECODE=1",
                "PATH=/usr/local/bin:/usr/bin:/bin",
            ],
        },
        _mooncake_layers,
        MOONCAKE_DEBIAN,
    ),
    "kueue": Image(
        "kueue",
        f"registry.k8s.io/kueue/kueue:{KUEUE_VERSION}",
        {"user": "65532", "entrypoint": ["/manager"], "cmd": [], "env": []},
        _go_layers("build.sh", "KUEUE_VERSION", {"/manager": "kueue"}),
    ),
    "nfd": Image(
        "nfd",
        f"registry.k8s.io/nfd/node-feature-discovery:{NFD_VERSION}",
        # Non-root: the NFD chart runs master and worker with runAsNonRoot (no runAsUser).
        {"user": "65534", "entrypoint": [], "cmd": ["nfd-master"], "env": ["PATH=/usr/bin:/bin"]},
        _go_layers(
            "build-node.sh",
            "NFD_VERSION",
            {f"/usr/bin/{b}": b for b in ("nfd-master", "nfd-worker", "nfd-gc")},
        ),
    ),
    # The examples' user image (examples/10, examples/61), built from the Ubuntu archive; the
    # config is the one Docker Hub's ubuntu image carries.
    "ubuntu": Image(
        "ubuntu",
        "docker.io/library/ubuntu:24.04",
        {
            "user": "0",
            "entrypoint": [],
            "cmd": ["/bin/bash"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        _ubuntu_layers,
    ),
    "pause": Image(
        "pause",
        "registry.k8s.io/pause:3.10",
        {
            "user": "65535",
            "entrypoint": [
                "/bin/busybox",
                "sh",
                "-c",
                "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done",
            ],
            "cmd": [],
            "env": [],
        },
        _pause_layers,
    ),
}


# Built only when named (make dev does): no test runs them, and their sources lie outside the
# machine's Debian mirror.
ON_REQUEST = ("ubuntu",)


def _say(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BuildError(f"{what} failed: {' | '.join(tail)}")
    return proc


def _need(tool: str) -> None:
    """Where a layer or the packing needs ``tool``: one line naming its Debian package when absent."""
    if shutil.which(tool) is None:
        raise BuildError(f"missing Debian package {TOOLS[tool]}: run scripts/ensure-container-tools.sh")


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _cached(path: Path, make) -> Path:
    """``make(tmp)`` writes the file; it becomes ``path`` only when whole."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{os.getpid()}.{path.name}")  # the suffix says what to write (mmdebstrap)
    try:
        make(tmp)
        tmp.rename(path)
    finally:
        if tmp.exists():
            if tmp.is_dir():
                shutil.rmtree(tmp)
            else:
                tmp.unlink()
    return path


# --- layers -------------------------------------------------------------------------------------


BASE_HOOKS = (
    # The operator's non-root user; sshd's privilege-separation directory.
    'chroot "$1" sh -c "getent passwd 65532 >/dev/null || (groupadd --gid 65532 gpustack && useradd --uid 65532 --gid 65532 --no-create-home '
    '--shell /usr/sbin/nologin gpustack); mkdir -p /run/sshd"',
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/* '
    '"$1"/usr/share/locale/* "$1"/etc/ssh/ssh_host_*',
)


def unknown_packages(packages: tuple[str, ...]) -> list[str]:
    """The packages this machine's Debian sources do not list (mmdebstrap uses the same sources).
    Empty when the machine knows none of them: its lists may just be absent, mmdebstrap fetches its own."""
    unknown = [
        p for p in packages if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0
    ]
    return [] if len(unknown) == len(packages) else unknown


def _base_layer(image: Image) -> Path:
    key = _digest(FORMAT, SUITE, *image.debian, *BASE_HOOKS)
    if not (CACHE / "layers" / f"base-{key}.tar").exists() and (unknown := unknown_packages(image.debian)):
        raise BuildError(f"{image.name}: Debian {SUITE} has no package {', '.join(unknown)}")

    def make(out: Path) -> None:
        _need("mmdebstrap")
        started = time.monotonic()
        _say(f"{image.name}: Debian {SUITE} with {', '.join(image.debian)} (mmdebstrap) ...")
        argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
                f"--include={','.join(image.debian)}"]  # fmt: skip
        argv += [f"--customize-hook={h}" for h in BASE_HOOKS]
        argv += [SUITE, str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:  # an unknown package was named before (unknown_packages)
            text = proc.stderr + proc.stdout
            last = [line for line in text.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
            raise BuildError(
                f"{image.name}: mmdebstrap could not build the base ({last[0]}; no Debian mirror?)"
            )
        _say(f"{image.name}: base in {time.monotonic() - started:.0f} s")

    return _cached(CACHE / "layers" / f"base-{key}.tar", make)


UBUNTU = "http://archive.ubuntu.com/ubuntu"
UBUNTU_SUITE = "noble"
# The Ubuntu archive's signing keys: ubuntu-keyring from noble's main, checked against its
# Packages entry's SHA256 as pinned here (the machine's apt trusts Debian's keys only).
UBUNTU_KEYRING = (
    "pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb",
    "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8",
)


def _ubuntu_keyring() -> Path:
    path, sha256 = UBUNTU_KEYRING

    def make(out: Path) -> None:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{UBUNTU}/{path}", timeout=60) as response:
                data = response.read()
        except OSError as error:
            raise BuildError(f"ubuntu: cannot fetch {UBUNTU}/{path} ({error})") from error
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BuildError(f"ubuntu: {path} does not match the SHA256 pinned in images/build.py")
        with tempfile.TemporaryDirectory(prefix="gpustack-keyring-") as tmp:
            (Path(tmp) / "keyring.deb").write_bytes(data)
            _run(["dpkg-deb", "-x", f"{tmp}/keyring.deb", f"{tmp}/x"], "dpkg-deb -x ubuntu-keyring")
            shutil.copyfile(f"{tmp}/x/usr/share/keyrings/ubuntu-archive-keyring.gpg", out)

    return _cached(CACHE / "layers" / f"ubuntu-keyring-{sha256[:16]}.gpg", make)


def _ubuntu_layer() -> Path:
    key = _digest(FORMAT, UBUNTU, UBUNTU_SUITE, *UBUNTU_KEYRING, BASE_HOOKS[1])

    def make(out: Path) -> None:
        _need("mmdebstrap")
        started = time.monotonic()
        _say(f"ubuntu: Ubuntu {UBUNTU_SUITE} minbase from {UBUNTU} (mmdebstrap) ...")
        with tempfile.TemporaryDirectory(prefix="gpustack-keyring-") as tmp:
            # apt checks signatures as its sandbox user, who cannot read root's ~/.cache.
            os.chmod(tmp, 0o755)
            keyring = shutil.copyfile(_ubuntu_keyring(), f"{tmp}/ubuntu-archive-keyring.gpg")
            os.chmod(keyring, 0o644)
            argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet", "--components=main",
                    f"--keyring={keyring}", f"--customize-hook={BASE_HOOKS[1]}",
                    UBUNTU_SUITE, str(out), UBUNTU]  # fmt: skip
            proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            last = [line for line in (proc.stderr + proc.stdout).strip().splitlines() if line.strip()][-1:]
            raise BuildError(f"ubuntu: mmdebstrap could not build noble ({(last or ['(no output)'])[0]})")
        _say(f"ubuntu: noble in {time.monotonic() - started:.0f} s")

    return _cached(CACHE / "layers" / f"ubuntu-{key}.tar", make)


def _deps_key() -> str:
    """scripts/deps_key.py's key, the one scripts/bootstrap.sh names the wheelhouse by."""
    spec = importlib.util.spec_from_file_location("deps_key", REPO / "scripts" / "deps_key.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.deps_key(REPO))


def _wheelhouse() -> Path:
    want = _deps_key()
    house = CACHE_ROOT / "wheels" / want
    if not (house / ".complete").exists():
        raise BuildError(
            f"no wheelhouse at {house}: run `make bootstrap` first (it resolves the wheels once)"
        )
    return house


def _runtime_requirements() -> list[str]:
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def _deps_layer() -> Path:
    house = _wheelhouse()
    requirements = _runtime_requirements()
    key = _digest(FORMAT, "pyc", *sorted(p.name for p in house.glob("*.whl")), *requirements)

    def make(out: Path) -> None:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="gpustack-deps-") as tmp:
            target = Path(tmp) / SITE.lstrip("/") / "lib"
            _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(house),
                  "--target", str(target), *requirements],
                 "pip install of the runtime dependencies from the wheelhouse")  # fmt: skip
            shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts with this machine's paths
            _tar_dir(Path(tmp), out)
        _say(f"operator: dependencies in {time.monotonic() - started:.0f} s")

    return _cached(CACHE / "layers" / f"deps-{key}.tar", make)


def _app_files() -> list[Path]:
    listed = _run(["git", "ls-files", "-z", "--", *PACKAGES, "charts"], "git ls-files", cwd=REPO).stdout
    files = [Path(p) for p in listed.split("\0") if p]
    missing = [p for p in files if not (REPO / p).exists()]
    files = [p for p in files if p not in missing]
    built = sorted((REPO / "fastpath").glob("*.so")) + sorted(
        (REPO / "nodeplugins" / "protos").rglob("*_pb2*.py")
    )
    if not any(p.suffix == ".so" for p in built) or not any("_pb2" in p.name for p in built):
        raise BuildError(
            "the checkout has no compiled extensions or generated protos: run `make bootstrap` first"
        )
    return sorted(files + [p.relative_to(REPO) for p in built])


def _app_layer() -> Path:
    files = _app_files()
    h = hashlib.sha256(FORMAT.encode())
    for rel in files:
        h.update(str(rel).encode() + b"\0" + (REPO / rel).read_bytes())
    key = h.hexdigest()[:16]

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="gpustack-app-") as tmp:
            root = Path(tmp)
            for rel in files:
                dest = root / SITE.lstrip("/") / "app" / rel
                if rel.parts[0] == "charts":
                    dest = root / "etc" / "gpustack" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, dest)
            # Bytecode now: the worker's root filesystem is read-only (Python 3.11 here and there).
            _run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(root / SITE.lstrip("/") / "app")],
                 "compileall of the project")  # fmt: skip
            script = root / "usr" / "local" / "bin" / "gpustack-operator"
            script.parent.mkdir(parents=True)
            script.write_text('#!/bin/sh\nexec /usr/bin/python3 -m gpustack_operator "$@"\n')
            script.chmod(0o755)
            _tar_dir(root, out)

    return _cached(CACHE / "layers" / f"app-{key}.tar", make)


STANDIN_PROGRAMS = {
    # The engines' entry points, as the rendered command lines call them.
    "usr/local/bin/vllm": '#!/bin/sh\nexec /usr/bin/python3 -m standin vllm "$@"\n',
    "opt/gpustack/engine/sglang/__init__.py": '"""The stand-in engine under the module name of SGLang."""\n',
    "opt/gpustack/engine/sglang/launch_server.py": (
        "import sys\n\nfrom standin.__main__ import main\n\nsys.exit(main(['sglang', *sys.argv[1:]]))\n"
    ),
}


def _standin_layer() -> Path:
    listed = _run(["git", "ls-files", "-z", "--", "standin"], "git ls-files", cwd=REPO).stdout
    files = tuple(p for p in listed.split("\0") if p and (REPO / p).exists())
    return _files_layer("engine", files, f"{SITE}/engine", programs=STANDIN_PROGRAMS)


MOONCAKE_SKIP = (
    "pip",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "distutils-precedence.pth",
    "__pycache__",
)


def _mooncake_site() -> Path:
    """The site-packages of the venv scripts/ensure-mooncake.sh keeps (installed now if missing)."""
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-mooncake.sh")], capture_output=True, text=True
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BuildError(f"mooncake: scripts/ensure-mooncake.sh failed: {tail[0]}")
    venv = Path(proc.stdout.strip().splitlines()[-1]).parent / "venv"
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found or not (found[0] / "mooncake" / "mooncake_master").exists():
        raise BuildError(
            f"mooncake: no mooncake package under {venv}: remove it and run scripts/ensure-mooncake.sh"
        )
    return found[0]


def _mooncake_programs() -> dict[str, str]:
    """The programs the renderer calls, each under tini so that SIGTERM stops it (PID 1 ignores a
    signal it has no handler for)."""
    package = f"{MOONCAKE_SITE}/mooncake"
    programs = {
        "usr/local/bin/mooncake_client": f'#!/bin/sh\nexec /usr/bin/tini -s -- {package}/mooncake_client "$@"\n',
        # The master through the stand-in of its Kubernetes Lease backend (standin/lease_master.py),
        # which the wheel lacks; without the election flags it execs the master unchanged.
        "usr/local/bin/mooncake_master": (
            f"#!/bin/sh\nPYTHONPATH={SITE}/engine exec /usr/bin/tini -s -- /usr/bin/python3 -m standin.lease_master "
            f'{package}/mooncake_master "$@"\n'
        ),
    }
    programs["usr/local/bin/mc_store_rest_server"] = (
        '#!/bin/sh\nexec /usr/bin/tini -s -- /usr/bin/python3 -m mooncake.mooncake_store_service "$@"\n'
    )
    return programs


def _mooncake_layer() -> Path:
    site = _mooncake_site()
    entries = sorted(
        p for p in site.iterdir() if p.name not in MOONCAKE_SKIP and not p.name.startswith("pip")
    )
    distributions = [p.name for p in entries if p.name.endswith(".dist-info")]
    key = _digest(FORMAT, *distributions, *_mooncake_programs().values())

    def make(out: Path) -> None:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="gpustack-mooncake-") as tmp:
            root = Path(tmp)
            target = root / MOONCAKE_SITE.lstrip("/")
            target.mkdir(parents=True)
            for entry in entries:
                if entry.is_dir():
                    shutil.copytree(entry, target / entry.name, symlinks=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
                else:
                    shutil.copy2(entry, target / entry.name)
            for program, text in _mooncake_programs().items():
                dest = root / program
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)
                dest.chmod(0o755)
            _run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(target)],
                 "compileall of the Mooncake packages")  # fmt: skip
            _tar_dir(root, out)
        _say(f"mooncake: the store's packages in {time.monotonic() - started:.0f} s")

    return _cached(CACHE / "layers" / f"mooncake-{key}.tar", make)


LEASE_MASTER_FILES = ("standin/__init__.py", "standin/kube.py", "standin/lease_master.py")


def _files_layer(
    name: str, files: tuple[str, ...], under: str, programs: Mapping[str, str] | None = None
) -> Path:
    """A layer of the checkout's ``files`` under the image path ``under``, and ``programs`` (image
    path -> text; executable under ``usr/``), compiled."""
    programs = dict(programs or {})
    key = _digest(
        FORMAT,
        under,
        *(f"{rel}\0{(REPO / rel).read_text()}" for rel in files),
        *(f"{path}\0{text}" for path, text in sorted(programs.items())),
    )

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=f"gpustack-{name}-") as tmp:
            root = Path(tmp)
            for rel in files:
                dest = root / under.lstrip("/") / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, dest)
            for program, text in programs.items():
                dest = root / program
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)
                dest.chmod(0o755 if program.startswith("usr/") else 0o644)
            _run(
                [sys.executable, "-m", "compileall", "-q", str(root / under.lstrip("/"))],
                f"compileall of {name}",
            )
            _tar_dir(root, out)

    return _cached(CACHE / "layers" / f"{name}-{key}.tar", make)


ROUTER_PROGRAMS = {
    # The router's program, as the rendered router container calls it.
    "usr/local/bin/vllm-router": '#!/bin/sh\nexec /usr/bin/python3 -m standin.router "$@"\n',
}


def _programs_layer(name: str, programs: dict[str, str]) -> Path:
    """A layer of small executable scripts at the paths ``programs`` names."""
    key = _digest(FORMAT, *(f"{path}\0{text}" for path, text in sorted(programs.items())))

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=f"gpustack-{name}-") as tmp:
            for program, text in programs.items():
                dest = Path(tmp) / program
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)
                dest.chmod(0o755)
            _tar_dir(Path(tmp), out)

    return _cached(CACHE / "layers" / f"{name}-programs-{key}.tar", make)


def _ssh_layer() -> Path:
    here = REPO / "images" / "ssh-server"
    sources = {"etc/ssh/sshd_config": here / "sshd_config",
               "usr/local/bin/entrypoint": here / "entrypoint.sh",
               "usr/local/bin/enter-main": here / "enter-main.sh"}  # fmt: skip
    key = _digest(FORMAT, *(k + "\0" + p.read_text() for k, p in sorted(sources.items())))

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="gpustack-ssh-") as tmp:
            for rel, src in sources.items():
                dest = Path(tmp) / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                dest.chmod(0o755 if rel.startswith("usr/") else 0o644)
            (Path(tmp) / "etc" / "ssh" / "sshd_config.d").mkdir(parents=True, exist_ok=True)
            _tar_dir(Path(tmp), out)

    return _cached(CACHE / "layers" / f"ssh-{key}.tar", make)


def _busybox_layer() -> Path:
    _need("busybox")
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    key = _digest(FORMAT, hashlib.sha256(busybox.read_bytes()).hexdigest())

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="gpustack-pause-") as tmp:
            (Path(tmp) / "bin").mkdir()
            shutil.copy2(busybox, Path(tmp) / "bin" / "busybox")
            for applet in ("sh", "sleep"):
                (Path(tmp) / "bin" / applet).symlink_to("busybox")
            _tar_dir(Path(tmp), out)

    return _cached(CACHE / "layers" / f"busybox-{key}.tar", make)


def _tar_dir(root: Path, out: Path) -> None:
    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(out, "w") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=owned_by_root)


# --- images -------------------------------------------------------------------------------------


def linked_libraries(binary: Path) -> list[Path]:
    """The shared libraries a dynamically linked binary loads (``ldd``), none for a static one."""
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if proc.returncode != 0:  # "not a dynamic executable"
        return []
    found = []
    for line in proc.stdout.splitlines():
        path = line.split("=>")[-1].strip().split(" (")[0].strip()
        if path.startswith("/"):
            found.append(Path(path))
    return found


def _binaries_layer(name: str, files: dict[str, Path]) -> Path:
    """A layer of the Go builds of tests/cluster at the paths ``files`` names, with the C libraries a
    binary links when it was not built static (a build with cgo on: the loader and libc)."""
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise BuildError(f"{name}: no {missing[0]}: run `make cluster-binaries` first")
    files = dict(files)
    for binary in list(files.values()):
        for library in linked_libraries(binary):
            files.setdefault(str(library), library)
    key = _digest(
        FORMAT,
        *(f"{dest}={hashlib.sha256(src.read_bytes()).hexdigest()}" for dest, src in sorted(files.items())),
    )

    def make(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=f"gpustack-{name}-") as tmp:
            for dest, src in files.items():
                target = Path(tmp) / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
                target.chmod(0o755)
            (Path(tmp) / "tmp").mkdir(mode=0o1777)
            (Path(tmp) / "tmp").chmod(0o1777)
            _tar_dir(Path(tmp), out)

    return _cached(CACHE / "layers" / f"{name}-{key}.tar", make)


def build(name: str, env: tuple[str, ...] = (), tag_suffix: str = "") -> tuple[str, Path]:
    """The image ``name``'s reference and its OCI archive (built unless cached). ``env`` adds
    variables to the image's configuration, under the tag ``<tag><tag_suffix>`` (a variant for one
    cluster, e.g. ``make dev``'s engine that knows where its Hub is)."""
    image = IMAGES[name]
    if env or tag_suffix:
        config = {**image.config, "env": [*image.config["env"], *env]}
        image = dataclasses.replace(image, ref=f"{image.ref}{tag_suffix}", config=config)
    layers = image.layers(image)
    key = _digest(FORMAT, image.ref, json.dumps(image.config, sort_keys=True), *(p.name for p in layers))
    tag = _tag(image)

    def make(out: Path) -> None:
        _need("umoci")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"gpustack-{name}-") as tmp:
            layout = f"{tmp}/layout"
            _run(["umoci", "init", "--layout", layout], "umoci init")
            _run(["umoci", "new", "--image", f"{layout}:{tag}"], "umoci new")
            for layer in layers:
                _run(["umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", str(layer)],
                     f"umoci add-layer {layer.name}")  # fmt: skip
            config = ["umoci", "config", "--image", f"{layout}:{tag}", f"--config.user={image.config['user']}",
                      "--config.workingdir=/", "--os=linux", "--architecture=amd64",
                      f"--config.label=org.opencontainers.image.title=gpustack-operator-py {name}",
                      f"--config.label=org.opencontainers.image.version={VERSION}",
                      "--config.label=org.opencontainers.image.licenses=Apache-2.0"]  # fmt: skip
            config += [f"--config.entrypoint={part}" for part in image.config["entrypoint"]]
            config += [f"--config.cmd={part}" for part in image.config["cmd"]] or ["--clear=config.cmd"]
            config += [f"--config.env={env}" for env in image.config["env"]]
            _run(config, "umoci config")
            _run(["umoci", "gc", "--layout", layout], "umoci gc")
            with tarfile.open(out, "w") as tar:
                for child in sorted(Path(layout).iterdir()):
                    tar.add(child, arcname=child.name)
        _say(
            f"{name}: {image.ref} packed in {time.monotonic() - started:.0f} s ({out.stat().st_size >> 20} MiB)"
        )

    return image.ref, _cached(CACHE / f"{name}-{key}.oci.tar", make)


def main(argv: list[str]) -> int:
    only_ref = "--ref" in argv
    names = [a for a in argv if not a.startswith("--")] or [n for n in IMAGES if n not in ON_REQUEST]
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        print(f"images: unknown image {unknown[0]} (known: {', '.join(IMAGES)})", file=sys.stderr)
        return 2
    try:
        for name in names:
            if only_ref:
                print(f"{name} {IMAGES[name].ref}")
                continue
            ref, archive = build(name)
            print(f"{name} {ref} {archive}")
    except BuildError as error:
        print(f"images: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
