"""The whole-cluster check's models of other people's systems each declare, once, the release they
follow; each must be the release components/versions.py pins. Bumping a pin fails here until the
model has been re-read against the new release's sources and its declared version updated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components import versions
from render.cluster import kueue_objects, pod_security

CLUSTER_DIR = Path(kueue_objects.__file__).parent
# Upstream files a model's prose names (pkg/.../x.go, cmd/..., policy/check_*.go, a chart's templates/).
_UPSTREAM_FILE = re.compile(r"\b(?:(?:pkg|cmd|apis|policy)/[\w/.-]*?(?:\w+|\*)\.go|templates/[\w/.-]+\.yaml)")


def _model_files(pattern: str) -> list[Path]:
    return sorted(CLUSTER_DIR.glob(pattern))


def _sources_named(files: list[Path]) -> list[str]:
    return sorted({m.group(0) for f in files for m in _UPSTREAM_FILE.finditer(f.read_text())})


def mismatch(model: str, declared: object, pinned: object, files: list[Path]) -> str | None:
    """None when the model follows the pinned release; else what to re-check before updating it."""
    if declared == pinned:
        return None
    modules = ", ".join(str(f.relative_to(CLUSTER_DIR.parent.parent)) for f in files)
    return (f"{model}: the model follows {declared!r}, components/versions.py pins {pinned!r}. Re-read the "
            f"new release's {', '.join(_sources_named(files))} (and the docs each module names) against "
            f"{modules}, then update the declared version.")


def _kueue(pinned_chart: str, pinned_image: str) -> str | None:
    files = _model_files("kueue_*.py")
    return (mismatch("Kueue model", kueue_objects.MODELLED_VERSION, pinned_chart, files)
            or mismatch("Kueue model", f"v{kueue_objects.MODELLED_VERSION}", pinned_image, files))


def _pod_security(supported: tuple[str, ...]) -> str | None:
    return mismatch("Pod Security model", pod_security.MODELLED_MINORS, supported,
                    _model_files("pod_security.py"))


def test_kueue_model_follows_the_pinned_kueue() -> None:
    problem = _kueue(versions.KUEUE_CHART_VERSION, versions.KUEUE_IMAGE_TAG)
    assert problem is None, problem


def test_pod_security_model_follows_the_supported_kubernetes_minors() -> None:
    problem = _pod_security(versions.KUBERNETES_SUPPORTED_MINORS)
    assert problem is None, problem
    assert versions.KUBERNETES_DEFAULT.rsplit(".", 1)[0] in pod_security.MODELLED_MINORS


@pytest.mark.parametrize("chart, image", [("0.20.0", "v0.20.0"), (kueue_objects.MODELLED_VERSION, "v0.20.0")])
def test_a_kueue_bump_fails_naming_what_to_recheck(chart: str, image: str) -> None:
    problem = _kueue(chart, image)
    assert problem is not None
    for source in ("pkg/scheduler/preemption/preemption.go", "pkg/features/kube_features.go",
                   "render/cluster/kueue_admission.py", "render/cluster/kueue_node_replacement.py"):
        assert source in problem


def test_a_new_kubernetes_minor_fails_naming_what_to_recheck() -> None:
    problem = _pod_security((*versions.KUBERNETES_SUPPORTED_MINORS, "1.36"))
    assert problem is not None
    assert "policy/check_*.go" in problem and "render/cluster/pod_security.py" in problem


def test_the_kueue_version_is_written_once() -> None:
    """Prose that repeats the number drifts when the declaration moves; it names MODELLED_VERSION."""
    version = re.compile(rf"v?{re.escape(kueue_objects.MODELLED_VERSION)}\b")
    repeats = [f"{f.name}:{n}" for f in _model_files("*.py")
               for n, line in enumerate(f.read_text().splitlines(), 1)
               if version.search(line) and not line.startswith("MODELLED_VERSION = ")]
    assert not repeats, f"the Kueue version written again (name kueue_objects.MODELLED_VERSION): {repeats}"
