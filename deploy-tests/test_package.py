"""The Debian package scripts/package makes (debhelper, from debian/), read as files: its
Depends, its binary and its symbols, its layout, its maintainer scripts, and lintian's
verdict. (Installed and run under systemd: test_package_systemd.py.)"""

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
    # The shared libraries, versions included, then what dh_installsysusers adds (the
    # users are made by systemd-sysusers) and procps (/bin/kill, the unit's ExecReload).
    assert depends == f"{shlibs}, systemd | systemd-standalone-sysusers | systemd-sysusers, procps"
    names = package_names(shlibs)
    assert {"libcurl4", "libfcgi0ldbl", "libhiredis0.14", "libssl3", "libc-ares2"} <= set(names)
    assert not [name for name in names if "swift" in name or name.endswith("-dev")]


def test_recommends_and_suggests(unpacked):
    fields = control_fields(package_path())
    assert package_names(fields["Recommends"]) == ["nginx", "redis-server"]
    assert package_names(fields["Suggests"]) == ["openssl", "python3", "stunnel4"]


def build_id(path):
    notes = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True,
                           timeout=60).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)


def test_the_binary_needs_no_toolchain_is_stripped_and_its_symbols_are_kept_beside_the_package(unpacked):
    binary = unpacked / "usr/bin/siwa-endpoint"
    libraries = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True, timeout=60).stdout
    assert "not found" not in libraries
    assert not re.search(r"libswift|libFoundation|libdispatch|/opt/|toolchain", libraries)
    sections = subprocess.run(["readelf", "-S", "-W", str(binary)], check=True, capture_output=True, text=True,
                              timeout=60).stdout
    assert ".symtab" not in sections and ".debug_info" not in sections
    # The symbols: dh_strip's -dbgsym package beside the .deb, under the binary's build ID
    # (where gdb looks for them), and named by the binary's .gnu_debuglink.
    dbgsym = package_path().with_name(package_path().name.replace("siwa-endpoint_", "siwa-endpoint-dbgsym_", 1))
    identifier = build_id(binary)
    symbols = unpacked.parent / (unpacked.name + "-dbgsym")
    subprocess.run(["dpkg-deb", "-x", str(dbgsym), str(symbols)], check=True, timeout=300)
    try:
        debug = symbols / "usr/lib/debug/.build-id" / identifier[:2] / f"{identifier[2:]}.debug"
        link = subprocess.run(["readelf", "-p", ".gnu_debuglink", str(binary)], check=True, capture_output=True,
                              timeout=60).stdout.decode(errors="replace")
        assert debug.name in link
        debug_sections = subprocess.run(["readelf", "-S", "-W", str(debug)], check=True, capture_output=True,
                                        text=True, timeout=60).stdout
        assert ".symtab" in debug_sections
        assert build_id(debug) == identifier
    finally:
        subprocess.run(["rm", "-rf", str(symbols)], check=False)
    version = subprocess.run([str(binary), "--version"], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    package_version = control_fields(package_path())["Version"]
    assert version == f"siwa-endpoint {package_version.rsplit('-', 1)[0]}\n"
    assert package_path().name == f"siwa-endpoint_{package_version}_{control_fields(package_path())['Architecture']}.deb"


def test_the_layout_follows_debian(unpacked):
    files = sorted(str(path.relative_to(unpacked)) for path in unpacked.rglob("*")
                   if path.is_file() and "DEBIAN" not in path.parts)
    conffiles = sorted((unpacked / "DEBIAN" / "conffiles").read_text().split())
    assert conffiles == ["/etc/nginx/conf.d/siwa-endpoint-http.conf", "/etc/nginx/sites-available/siwa-endpoint.conf",
                         "/etc/redis/siwa-endpoint-users.conf", "/etc/redis/siwa-endpoint.conf",
                         "/etc/siwa-endpoint/env"]
    # Everything under /etc is a conffile; nothing under /usr/local.
    assert sorted("/" + f for f in files if f.startswith("etc/")) == sorted(conffiles)
    assert not [f for f in files if f.startswith("usr/local")]
    assert "usr/bin/siwa-endpoint" in files
    for unit in ("siwa-endpoint@.service", "siwa-endpoint-reconcile.service", "siwa-endpoint-reconcile.timer",
                 "siwa-endpoint-deliver.service"):
        assert f"lib/systemd/system/{unit}" in files
    # The users and directories, declared for systemd-sysusers and systemd-tmpfiles.
    assert "usr/lib/sysusers.d/siwa-endpoint.conf" in files and "usr/lib/tmpfiles.d/siwa-endpoint.conf" in files
    for text in ("usr/share/doc/siwa-endpoint/copyright", "usr/share/doc/siwa-endpoint/changelog.Debian.gz",
                 "usr/share/siwa-endpoint/scripts/rollout", "usr/share/siwa-endpoint/scripts/lib/release.sh",
                 "usr/share/siwa-endpoint/examples/python/siwa_state.py",
                 "usr/share/siwa-endpoint/prometheus/siwa-endpoint-rules.yml",
                 "usr/share/siwa-endpoint/scripts/lib/rollout-common.sh",
                 "usr/share/siwa-endpoint/scripts/lib/rollout-slots.sh",
                 "usr/share/siwa-endpoint/scripts/lib/rollout-nodes.sh",
                 "usr/share/siwa-endpoint/webhooks.json.example",
                 "usr/share/siwa-endpoint/siwa-webhook-v1.schema.json",
                 "usr/share/doc/siwa-endpoint/README.md.gz"):
        assert text in files
    # The README links to its pages in docs/: they ship beside it (dh_compress compresses
    # those over 4 KiB).
    for page in sorted((REPO / "docs").glob("*.md")):
        shipped = {f"usr/share/doc/siwa-endpoint/docs/{page.name}", f"usr/share/doc/siwa-endpoint/docs/{page.name}.gz"}
        assert shipped & set(files), page.name
    service = (unpacked / "lib/systemd/system/siwa-endpoint@.service").read_text()
    reconcile = (unpacked / "lib/systemd/system/siwa-endpoint-reconcile.service").read_text()
    deliver = (unpacked / "lib/systemd/system/siwa-endpoint-deliver.service").read_text()
    assert [line for line in deliver.splitlines() if line.startswith("ExecStart=")] == [
        "ExecStart=/usr/bin/siwa-endpoint deliver --env-file /etc/siwa-endpoint/env"]
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
    overrides = (REPO / "debian/siwa-endpoint.lintian-overrides").read_text()
    # Every override has a comment line above it: the reason.
    lines = overrides.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("siwa-endpoint:"):
            assert index > 0 and (lines[index - 1].startswith("#") or lines[index - 1].startswith("siwa-endpoint:"))


def test_the_maintainer_scripts_are_debhelpers_and_change_units_only_through_its_helpers(unpacked):
    """Users, directories and the units' state come from debhelper's code (systemd-sysusers,
    systemd-tmpfiles, deb-systemd-helper, deb-systemd-invoke); the scripts' own systemctl
    calls are queries (is-active, list-units), daemon-reload, and the one enable of the
    first slot that deb-systemd-helper cannot do (an instance of a template unit)."""
    scripts = {name: (unpacked / "DEBIAN" / name).read_text() for name in ("postinst", "prerm", "postrm")}
    assert "systemd-sysusers" in scripts["postinst"] and "systemd-tmpfiles" in scripts["postinst"]
    assert "deb-systemd-helper" in scripts["postinst"] and "deb-systemd-helper purge" in scripts["postrm"]
    assert "deb-systemd-invoke stop" in scripts["prerm"]
    for name, text in scripts.items():
        assert "#DEBHELPER#" not in text and "Automatically added by dh_" in text, name
        assert not re.search(r"\b(useradd|adduser|groupadd)\b", text), name
        for line in text.splitlines():
            calls = re.findall(r"\bsystemctl\b(?:\s+--\S+)*\s+(\S+)", line.split("#", 1)[0])
            for verb in calls:
                allowed = {"is-active", "list-units", "daemon-reload"}
                if name == "postinst":
                    allowed.add("enable")
                assert verb in allowed, f"{name}: {line.strip()}"
    assert len(re.findall(r"^\s*systemctl enable ", scripts["postinst"], re.M)) == 1
