"""The OCI images of scripts/image, built once per test session from the Debian package
(SIWA_PACKAGE_DEB, the package scripts/package made) and unpacked with `umoci unpack`:
shared by test_image.py (the images read and run as their configuration says) and
test_kubernetes_pod.py (the rendered pod run from them)."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

from deploy_harness import REPO
from test_package_systemd import package_path


def run(args, **kwargs):
    kwargs.setdefault("timeout", 120)
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


class Image:
    """One image, unpacked: its runtime configuration (config.json) and its root."""

    def __init__(self, reference, bundle):
        run(["umoci", "unpack", "--image", reference, str(bundle)])
        self.bundle = bundle
        self.root = bundle / "rootfs"
        self.config = json.loads((bundle / "config.json").read_text())
        self.process = self.config["process"]
        self.uid = self.process["user"]["uid"]
        self.gid = self.process["user"]["gid"]

    @property
    def environment(self):
        return dict(entry.split("=", 1) for entry in self.process["env"])

    def passwd(self):
        return {fields[2]: fields for fields in
                (line.split(":") for line in (self.root / "etc/passwd").read_text().splitlines())}

    def files(self):
        """Every file and link of the root (not the directories)."""
        for path in self.root.rglob("*"):
            if path.is_symlink() or not path.is_dir():
                yield path

    def prepare_for_nspawn(self):
        (self.root / "usr/bin/getent").touch()
        home = self.root / "nonexistent"
        home.mkdir(exist_ok=True)
        os.chown(home, self.uid, self.gid)

    def library_resolution(self, binary):
        """The root's own dynamic loader lists what `binary` loads, inside the root."""
        return subprocess.run(["chroot", str(self.root), "/lib64/ld-linux-x86-64.so.2", "--list", binary],
                              capture_output=True, text=True, timeout=60)


def image_reference(workdir, name):
    """LAYOUT:TAG of the image `name` built by built_images into workdir."""
    return f"{workdir / 'oci'}/{name}:{package_version()}"


def image_configuration(reference):
    """The image's own configuration (Entrypoint, Cmd, Env, User, WorkingDir), from its
    OCI layout: what a runtime reads, before the pod's settings are applied."""
    layout, tag = reference.rsplit(":", 1)
    blobs = pathlib.Path(layout) / "blobs" / "sha256"
    index = json.loads((pathlib.Path(layout) / "index.json").read_text())
    [manifest] = [entry for entry in index["manifests"]
                  if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    manifest = json.loads((blobs / manifest["digest"].split(":")[1]).read_text())
    return json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())["config"]


def package_version():
    return subprocess.run(["dpkg-deb", "-f", str(package_path()), "Version"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def built_images():
    """(workdir, responder, nginx): the images built into workdir/oci, each unpacked once;
    removed when the generator is closed (the session fixture `images` of conftest.py)."""
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="siwa-image-"))
    try:
        started = time.monotonic()
        built = run([str(REPO / "scripts/image"), "--deb", str(package_path()), "--out", str(workdir / "oci")],
                    timeout=600)
        print(f"scripts/image: {time.monotonic() - started:.1f}s\n{built.stderr}")
        reference = built.stdout.strip().splitlines()[-1]
        version = package_version()
        assert reference == image_reference(workdir, "siwa-endpoint")
        for name in ("siwa-endpoint", "siwa-endpoint-nginx"):
            assert re.search(rf"^image: {name}:{re.escape(version)}: \d+ MiB compressed \(\d+ bytes, one layer\), "
                             rf"\d+ MiB unpacked \(\d+ bytes\)$", built.stderr, re.M), built.stderr
        responder = Image(reference, workdir / "responder")
        nginx = Image(image_reference(workdir, "siwa-endpoint-nginx"), workdir / "nginx")
        yield workdir, responder, nginx
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
