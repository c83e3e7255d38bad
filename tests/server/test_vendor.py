"""The vendored 3-D map library (clover/server/vendor.py): the pin, the hash check that guards the
fetch, what is extracted and stamped, and what the server serves from it (and nothing else)."""

import base64
import hashlib
import io
import re
import tarfile

import httpx
import pytest

from clover.server import vendor


def _tarball(path, files: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _package(tmp_path, drop: str | None = None):
    files = {m: f"// {m}\n".encode() for m in vendor.FILES if m != drop}
    files["package/README.md"] = b"not served"
    tgz = _tarball(tmp_path / "three.tgz", files)
    sri = "sha512-" + base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
    return tgz, {"package": "three", "version": "9.9.9", "integrity": sri}


def test_the_pin_is_one_version_and_its_registry_hash():
    p = vendor.pin()
    assert p["package"] == "three" and re.fullmatch(r"\d+\.\d+\.\d+", p["version"])
    assert len(base64.b64decode(p["integrity"].removeprefix("sha512-"), validate=True)) == 64


def test_unpack_keeps_only_the_served_files_and_stamps_them(tmp_path, monkeypatch):
    tgz, pin = _package(tmp_path)
    monkeypatch.setattr(vendor, "VENDOR", tmp_path / "vendor")
    monkeypatch.setattr(vendor, "pin", lambda: pin)
    assert not vendor.vendored()
    vendor.unpack(tgz, pin)
    assert sorted(p.name for p in (tmp_path / "vendor").iterdir()) == sorted([*vendor.SERVED, ".pin"])
    assert (tmp_path / "vendor" / "three.core.js").read_bytes() == b"// package/build/three.core.js\n"
    assert vendor.vendored()
    assert vendor.main(["--check"]) == 0
    (tmp_path / "vendor" / "OrbitControls.js").unlink()  # a file gone: not vendored, and --check says so
    assert not vendor.vendored() and vendor.main(["--check"]) == 1


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    tgz, pin = _package(tmp_path)
    monkeypatch.setattr(vendor, "VENDOR", tmp_path / "vendor")
    bad = {**pin, "integrity": "sha512-" + base64.b64encode(bytes(64)).decode()}
    with pytest.raises(ValueError, match="is not the pinned"):
        vendor.unpack(tgz, bad)
    assert not (tmp_path / "vendor").exists()  # nothing written
    tgz, pin = _package(tmp_path, drop="package/LICENSE")
    with pytest.raises(ValueError, match="has no file package/LICENSE"):
        vendor.unpack(tgz, pin)
    assert not (tmp_path / "vendor").exists()


def test_the_server_serves_the_vendored_files_and_nothing_else(live, tmp_path, monkeypatch):
    tgz, pin = _package(tmp_path)
    monkeypatch.setattr(vendor, "VENDOR", tmp_path / "vendor")
    monkeypatch.setattr(vendor, "pin", lambda: pin)
    vendor.unpack(tgz, pin)
    (tmp_path / "vendor" / "other.js").write_text("// not one of the library's files")
    with live() as srv:
        r = httpx.get(srv.url + "/playground/vendor/three.module.js")
        assert r.status_code == 200 and r.text == "// package/build/three.module.js\n"
        assert r.headers["content-type"].startswith("text/javascript")  # a module script needs a JS type
        assert httpx.get(srv.url + "/playground/vendor/LICENSE").headers["content-type"].startswith("text/plain")
        for name in ("other.js", ".pin", "..%2F..%2Fvendor.py", "three.module.js.tmp"):
            r = httpx.get(srv.url + "/playground/vendor/" + name)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", name
        assert httpx.get(srv.url + "/playground/config").json()["map3d"] == {"library": "three", "version": "9.9.9"}
        (tmp_path / "vendor" / ".pin").unlink()  # not stamped: the page is told there is no 3-D map
        assert httpx.get(srv.url + "/playground/config").json()["map3d"] is None
        assert httpx.get(srv.url + "/").status_code == 200


def test_the_page_loads_the_library_from_this_server_only(live):
    with live() as srv:
        page = httpx.get(srv.url + "/").text
    imports = re.findall(r"""import\("([^"]+)"\)""", page)
    mapped = re.findall(r'"three": "([^"]+)"', page)
    assert imports == ["three", "/playground/vendor/OrbitControls.js"] and mapped == [
        "/playground/vendor/three.module.js"
    ]
    assert all(("/playground/vendor/" + f) in page for f in ("three.module.js", "OrbitControls.js"))
    assert "//" not in "".join(imports + mapped).replace("/playground/vendor/", "")  # no other host


def test_make_setup_fetches_it_and_the_package_carries_it():
    """``make setup`` (which ``make run`` and ``make test`` depend on) runs the fetch; the files are
    package data, and git ignores them (they come from the pin, not the repository)."""
    root = vendor.HERE.parents[1]
    make = (root / "Makefile").read_text()
    assert re.search(r"^setup: \$\(STAMP\) \$\(VENDOR\)$", make, re.M)
    assert "VENDOR := clover/server/static/vendor/.pin" in make
    rule = re.search(r"^\$\(VENDOR\): (.*)\n((?:\t.*\n)+)", make, re.M)
    assert rule and "clover/server/three.pin" in rule.group(1) and "clover/server/vendor.py" in rule.group(2)
    pyproject = (root / "pyproject.toml").read_text()
    assert '"server/static/vendor/*"' in pyproject and '"server/*.pin"' in pyproject
    assert '"server/static/vendor/.pin"' in pyproject  # a glob's * leaves out the stamp, a dot file
    assert "/clover/server/static/vendor/" in (root / ".gitignore").read_text().splitlines()
    assert "npm" in (root / ".ci" / "run").read_text()
