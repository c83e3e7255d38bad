"""The playground's vendored browser library (three.js, pinned in ``three.pin``): which files the
page loads, where they live, and the build step that fetches them (docs/server.md, The 3-D map).

    python clover/server/vendor.py            # fetch unless already there (make setup runs it)
    python clover/server/vendor.py --check    # exit 1 unless every file is there, at the pin

The fetch runs ``npm pack <package>@<version>`` into a temporary folder, checks the tarball's
sha512 against the pin's ``integrity`` (npm's Subresource Integrity form), and extracts only the
module build, the orbit controls and the licence into ``static/vendor/``, with a stamp naming the
pin. Standard library only: it runs before the package is installed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIN_FILE = HERE / "three.pin"
VENDOR = HERE / "static" / "vendor"  # with a stamp, .pin, naming the pin its files are from
# the tarball's member -> the served file's name: the module build (which imports three.core.js
# beside it), the orbit controls (which import the bare name "three": the page's import map), the licence
FILES = {
    "package/build/three.module.js": "three.module.js",
    "package/build/three.core.js": "three.core.js",
    "package/examples/jsm/controls/OrbitControls.js": "OrbitControls.js",
    "package/LICENSE": "LICENSE",
}
SERVED = tuple(FILES.values())


def pin() -> dict[str, str]:
    """The pin's ``package``, ``version`` and ``integrity`` (key=value lines, # comments)."""
    out = {}
    for line in PIN_FILE.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    for key in ("package", "version", "integrity"):
        if not out.get(key):
            raise ValueError(f"{PIN_FILE} needs a {key}= line")
    if not out["integrity"].startswith("sha512-"):
        raise ValueError(f"{PIN_FILE}: integrity must be sha512-<base64>, got {out['integrity']!r}")
    return out


def stamp_text(p: dict[str, str]) -> str:
    return f"{p['package']}@{p['version']} {p['integrity']}\n"


def vendored() -> bool:
    """Whether every served file is in place and the stamp names the current pin."""
    try:
        stamp = (VENDOR / ".pin").read_text(encoding="utf-8")
        return stamp == stamp_text(pin()) and all((VENDOR / f).is_file() for f in SERVED)
    except OSError:
        return False


def integrity_of(path: Path) -> str:
    """A file's sha512 in the Subresource Integrity form npm records: ``sha512-<base64>``."""
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def unpack(tarball: Path, p: dict[str, str], dest: Path | None = None) -> None:
    """Check ``tarball`` against the pin, then extract ``FILES`` into ``dest`` and stamp it;
    ``ValueError`` (and nothing written) when the hash differs or a file is missing. ``dest``:
    ``VENDOR`` unless given."""
    dest = VENDOR if dest is None else dest
    got = integrity_of(tarball)
    if got != p["integrity"]:
        raise ValueError(f"{tarball.name}: integrity {got} is not the pinned {p['integrity']}")
    with tarfile.open(tarball, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        blobs = {}
        for name, served in FILES.items():
            m = members.get(name)
            if m is None or not m.isfile():
                raise ValueError(f"{tarball.name} has no file {name}")
            blobs[served] = tar.extractfile(m).read()
    dest.mkdir(parents=True, exist_ok=True)
    (dest / ".pin").unlink(missing_ok=True)  # no stamp while the files are being replaced
    for served, data in blobs.items():
        tmp = dest / (served + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest / served)
    (dest / ".pin").write_text(stamp_text(p), encoding="utf-8")


def fetch() -> None:
    """``npm pack`` the pinned package into a temporary folder, then ``unpack`` it."""
    p = pin()
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm not found: install Node.js's npm (Debian: apt-get install npm)")
    with tempfile.TemporaryDirectory(prefix="clover-vendor-") as tmp:
        spec = f"{p['package']}@{p['version']}"
        subprocess.run(
            [npm, "pack", spec, "--pack-destination", tmp, "--silent"], check=True, stdout=subprocess.DEVNULL
        )
        (tarball,) = Path(tmp).glob("*.tgz")
        unpack(tarball, p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="fetch the playground's pinned three.js build into clover/server/static/vendor"
    )
    ap.add_argument("--check", action="store_true", help="exit 1 unless the files are there, at the pin")
    args = ap.parse_args(argv)
    p = pin()
    if vendored():
        print(f"vendor: {p['package']} {p['version']} in {VENDOR}")
        return 0
    if args.check:
        print(f"vendor: {p['package']} {p['version']} is not in {VENDOR} (make setup fetches it)", file=sys.stderr)
        return 1
    fetch()
    print(f"vendor: fetched {p['package']} {p['version']} into {VENDOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
