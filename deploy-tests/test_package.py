"""The Debian package scripts/package makes, read as files: its Depends, its binary, its
layout, and lintian's verdict. (Installed and run under systemd: test_package_systemd.py.)"""

import pathlib
import re
import subprocess
import tempfile

import pytest

from deploy_harness import REPO
from test_package_systemd import package_path

DOCUMENTED_SIZE_LIMIT = 25 * 1024 * 1024


def control_fields(deb):
    text = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True,
                          timeout=60).stdout
    return dict(re.findall(r"^(\S+): (.*)$", text, re.M))


def package_names(field):
    return sorted(re.sub(r"\s*\(.*\)", "", alternative).strip() for alternative in field.split(","))


@pytest.fixture(scope="module")
def unpacked():
    directory = pathlib.Path(tempfile.mkdtemp(prefix="siwa-deb-"))
    subprocess.run(["dpkg-deb", "-R", str(package_path()), str(directory)], check=True, timeout=300)
    yield directory
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def test_depends_is_what_dpkg_shlibdeps_derives_from_the_binary(unpacked):
    source = unpacked.parent / (unpacked.name + "-source")
    (source / "debian").mkdir(parents=True)
    (source / "debian" / "control").write_text("Source: siwa-endpoint\n\nPackage: siwa-endpoint\nArchitecture: any\n")
    derived = subprocess.run(["dpkg-shlibdeps", "-O", str(unpacked / "usr/bin/siwa-endpoint")], cwd=source,
                             check=True, capture_output=True, text=True, timeout=120).stdout
    subprocess.run(["rm", "-rf", str(source)], check=False)
    shlibs = re.search(r"^shlibs:Depends=(.*)$", derived, re.M).group(1)
    depends = control_fields(package_path())["Depends"]
    # The shared libraries, versions included, then passwd (useradd, in postinst) and
    # procps (/bin/kill, the unit's ExecReload).
    assert depends == f"{shlibs}, passwd, procps"
    names = package_names(shlibs)
    assert {"libcurl4", "libfcgi0ldbl", "libhiredis0.14", "libssl3"} <= set(names)
    assert not [name for name in names if "swift" in name or name.endswith("-dev")]


def test_recommends_and_suggests(unpacked):
    fields = control_fields(package_path())
    assert package_names(fields["Recommends"]) == ["nginx", "redis-server"]
    assert package_names(fields["Suggests"]) == ["openssl", "python3", "stunnel4"]


def test_the_binary_needs_no_toolchain_is_stripped_and_its_symbols_are_kept_beside_the_package(unpacked):
    binary = unpacked / "usr/bin/siwa-endpoint"
    libraries = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True, timeout=60).stdout
    assert "not found" not in libraries
    assert not re.search(r"libswift|libFoundation|libdispatch|/opt/|toolchain", libraries)
    sections = subprocess.run(["readelf", "-S", "-W", str(binary)], check=True, capture_output=True, text=True,
                              timeout=60).stdout
    assert ".symtab" not in sections and ".debug_info" not in sections
    debug = package_path().with_suffix(".debug")
    link = subprocess.run(["readelf", "-p", ".gnu_debuglink", str(binary)], check=True, capture_output=True,
                          timeout=60).stdout.decode(errors="replace")
    assert debug.name in link
    debug_sections = subprocess.run(["readelf", "-S", "-W", str(debug)], check=True, capture_output=True, text=True,
                                    timeout=60).stdout
    assert ".symtab" in debug_sections
    version = subprocess.run([str(binary), "--version"], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    package_version = control_fields(package_path())["Version"]
    assert version == f"siwa-endpoint {package_version.rsplit('-', 1)[0]}\n"
    assert package_path().name == f"siwa-endpoint_{package_version}_{control_fields(package_path())['Architecture']}.deb"


def test_the_layout_follows_debian(unpacked):
    files = sorted(str(path.relative_to(unpacked)) for path in unpacked.rglob("*")
                   if path.is_file() and "DEBIAN" not in path.parts)
    conffiles = (unpacked / "DEBIAN" / "conffiles").read_text().split()
    assert conffiles == ["/etc/siwa-endpoint/env", "/etc/nginx/sites-available/siwa-endpoint.conf",
                         "/etc/nginx/conf.d/siwa-endpoint-http.conf", "/etc/redis/siwa-endpoint.conf"]
    # Everything under /etc is a conffile; nothing under /usr/local.
    assert sorted("/" + f for f in files if f.startswith("etc/")) == sorted(conffiles)
    assert not [f for f in files if f.startswith("usr/local")]
    assert "usr/bin/siwa-endpoint" in files
    for unit in ("siwa-endpoint@.service", "siwa-endpoint-reconcile.service", "siwa-endpoint-reconcile.timer"):
        assert f"lib/systemd/system/{unit}" in files
    for text in ("usr/share/doc/siwa-endpoint/copyright", "usr/share/doc/siwa-endpoint/changelog.Debian.gz",
                 "usr/share/siwa-endpoint/scripts/rollout", "usr/share/siwa-endpoint/scripts/lib/release.sh",
                 "usr/share/siwa-endpoint/examples/python/siwa_state.py",
                 "usr/share/siwa-endpoint/prometheus/siwa-endpoint-rules.yml",
                 "usr/share/doc/siwa-endpoint/README.md.gz"):
        assert text in files
    # The README links to its pages in docs/: they ship beside it.
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"usr/share/doc/siwa-endpoint/docs/{page.name}.gz" in files, page.name
    service = (unpacked / "lib/systemd/system/siwa-endpoint@.service").read_text()
    reconcile = (unpacked / "lib/systemd/system/siwa-endpoint-reconcile.service").read_text()
    assert [line for line in service.splitlines() if line.startswith("Exec")] == [
        "ExecStart=/usr/bin/siwa-endpoint serve --env-file /etc/siwa-endpoint/env",
        "ExecReload=/bin/kill -HUP $MAINPID"]
    assert [line for line in reconcile.splitlines() if line.startswith("ExecStart=")] == [
        "ExecStart=/usr/bin/siwa-endpoint reconcile --env-file /etc/siwa-endpoint/env --rate 5 "
        "/var/lib/siwa-endpoint-reconcile/users.jsonl"]
    assert oct((unpacked / "etc/siwa-endpoint/env").stat().st_mode & 0o777) == "0o640"


def test_the_package_is_within_the_documented_size():
    assert package_path().stat().st_size <= DOCUMENTED_SIZE_LIMIT


def test_lintian_reports_no_error_and_every_warning_left_is_overridden_with_a_reason():
    result = subprocess.run(["lintian", "--allow-root", "--fail-on", "error,warning", str(package_path())],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"^[EW]: ", result.stdout, re.M), result.stdout
    overrides = (pathlib.Path(__file__).resolve().parents[1] / "packaging/debian/lintian-overrides").read_text()
    # Every override has a comment line above it: the reason.
    lines = overrides.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("siwa-endpoint:"):
            assert index > 0 and (lines[index - 1].startswith("#") or lines[index - 1].startswith("siwa-endpoint:"))
