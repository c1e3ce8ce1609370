"""train/requirements-cpu.txt is the CPU environment scripts/pytest.sh installs with --no-deps; pyproject.toml holds the
pins a user reads. These tests keep the two from drifting apart and the list complete enough to import."""

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

TRAIN = Path(__file__).resolve().parents[1]
# What torch opens only on demand for GPU work, and the list therefore leaves out (see its header).
ON_DEMAND = {"triton", "nvidia-cuda-nvrtc", "nvidia-cusolver", "nvidia-nvtx", "cuda-bindings", "cuda-toolkit"}


def _locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (TRAIN / "requirements-cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"requirements-cpu.txt: {line!r} is not pinned as name==version"
        if req.marker is None or req.marker.evaluate():
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((TRAIN / "pyproject.toml").read_text())["project"]
    extras = [req for group in project["optional-dependencies"].values() for req in group]
    return [Requirement(req) for req in project["dependencies"] + extras]


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_every_pyproject_pin_is_locked_at_the_same_version() -> None:
    locked = _locked()
    for req in _declared():
        (spec,) = req.specifier
        assert spec.operator == "==", f"pyproject.toml: {req} is not pinned"
        assert locked.get(canonicalize_name(req.name)) == spec.version, f"{req} differs in requirements-cpu.txt"


def test_the_list_leaves_out_what_torch_opens_only_on_demand() -> None:
    """A list regenerated from a full install's `pip freeze` would bring back 1.1 GB the CPU tests never load."""
    assert sorted(ON_DEMAND & set(_locked())) == []
    assert sorted(name for name in ON_DEMAND if _installed(name)) == []


def test_the_list_is_closed_under_the_dependencies_of_what_it_holds() -> None:
    """--no-deps installs exactly the list, so a dependency missing from it would only show as an ImportError later.
    torch's on-demand CUDA packages are the one exception the list makes on purpose; cuda-toolkit is how torch asks
    for most nvidia-* packages, through extras, so those the import links are listed by their own names."""
    locked = _locked()
    missing = []
    for name in locked:
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            dep = canonicalize_name(req.name)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if name == "torch" and dep in ON_DEMAND:
                continue
            if dep not in locked:
                missing.append(f"{name} needs {req}")
    assert missing == []


def test_the_environment_is_the_list() -> None:
    """What pytest runs in was installed from the list (scripts/pytest.sh), not from an older or looser one."""
    locked = _locked()
    installed = {name: metadata.version(name) for name in locked}
    assert installed == locked
