"""Fixtures: one test PKI per session; real nginx stacks, always stopped."""

import contextlib
import pathlib
import shutil
import tempfile

import pytest

from deploy_harness import NginxStack, Pki


@pytest.fixture(scope="session")
def workdir():
    # Short path under the system temp dir: unix socket paths are limited to 108 bytes.
    directory = pathlib.Path(tempfile.mkdtemp(prefix="siwa-deploy-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pki(workdir):
    return Pki(workdir / "pki")


@pytest.fixture(scope="session")
def rsa_cert(pki):
    return pki.leaf("rsa-leaf", key="rsa")


@pytest.fixture(scope="session")
def ecdsa_cert(pki):
    return pki.leaf("ecdsa-leaf", key="ec")


@pytest.fixture(scope="session")
def stack_factory(workdir):
    """make(cert, key, site_edit=None, with_backend=True) -> started NginxStack.
    Every stack made is stopped at the end of the session, failures included."""
    stacks = []
    counter = iter(range(1_000_000))

    def make(cert, key, **options):
        stack = NginxStack(workdir / f"stack-{next(counter)}", cert, key, **options)
        stacks.append(stack)
        return stack.start()

    yield make
    for stack in stacks:
        with contextlib.suppress(Exception):
            stack.stop()


@pytest.fixture(scope="module")
def rsa_stack(stack_factory, rsa_cert):
    return stack_factory(*rsa_cert)


@pytest.fixture(scope="module")
def ecdsa_stack(stack_factory, ecdsa_cert):
    return stack_factory(*ecdsa_cert)


@pytest.fixture(scope="session")
def images():
    """The OCI images built once from the package (oci_images.built_images): one build
    for test_image.py and test_kubernetes_pod.py in the same run."""
    from oci_images import built_images

    yield from built_images()
