"""Build hooks of tli-client: the tli.v1 stubs are generated from proto/ while the package builds.

Nothing generated is committed. `build_py` runs grpcio-tools' protoc over ``tli/v1/*.proto``
and writes the modules into the build directory (``tli_client/_proto/tli/v1``), rewriting the
generated absolute imports (``from tli.v1 import …``) to the package's own
(``from tli_client._proto.tli.v1 import …``) so the stubs never claim a top-level ``tli``
package. An editable install writes them into ``src/tli_client/_proto`` instead (gitignored).

The .proto files are looked for in ``$TLI_PROTO_DIR``, then ``./proto`` (an sdist carries a
copy: see ``sdist`` below), then ``../../proto`` (this directory inside the tli repository).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import List

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
API_PACKAGE = "tli/v1"
STUB_ROOT = Path("tli_client") / "_proto"


def proto_root() -> Path:
    """The directory holding ``tli/v1/*.proto``, or a clear error naming where it looked."""
    candidates: List[Path] = []
    env = os.environ.get("TLI_PROTO_DIR")
    if env:
        candidates.append(Path(env))
    candidates += [HERE / "proto", HERE.parent.parent / "proto"]
    for root in candidates:
        if sorted((root / API_PACKAGE).glob("*.proto")):
            return root
    looked = ", ".join(str(c / API_PACKAGE) for c in candidates)
    raise SystemExit(
        f"tli-client: no {API_PACKAGE}/*.proto found (looked in {looked}); build the package "
        "from clients/python inside the tli repository, or set TLI_PROTO_DIR to the directory "
        "that holds tli/v1/*.proto"
    )


def api_protos(root: Path) -> List[Path]:
    # worker.proto is the Slurm workers' service (worker token only): not the client API.
    return [p for p in sorted((root / API_PACKAGE).glob("*.proto")) if p.name != "worker.proto"]


def check_version_follows_api(version: str, root: Path) -> None:
    """The package's major version must be the proto package's (tli.v1 -> 1.x.y)."""
    text = (root / API_PACKAGE / "training.proto").read_text(encoding="utf-8")
    found = re.search(r"^package\s+tli\.v(\d+)\s*;", text, re.MULTILINE)
    if not found:
        raise SystemExit("tli-client: training.proto declares no `package tli.vN;`")
    if version.split(".")[0] != found.group(1):
        raise SystemExit(
            f"tli-client: version {version} does not follow the API tli.v{found.group(1)}: the "
            f"major version must be {found.group(1)} (pyproject.toml [project] version)"
        )


def generate_stubs(out_dir: Path, version: str) -> None:
    """Runs grpcio-tools' protoc into ``out_dir/tli_client/_proto`` and fixes the imports."""
    from grpc_tools import protoc  # the build requirement (pyproject [build-system])
    import grpc_tools

    root = proto_root()
    check_version_follows_api(version, root)
    stub_dir = out_dir / STUB_ROOT
    if stub_dir.exists():
        shutil.rmtree(stub_dir)
    stub_dir.mkdir(parents=True)
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    protos = api_protos(root)
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={stub_dir}",
        f"--pyi_out={stub_dir}",
        f"--grpc_python_out={stub_dir}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"tli-client: protoc failed on {', '.join(map(str, protos))}")
    for pkg in [stub_dir, stub_dir / "tli", stub_dir / API_PACKAGE]:
        init = pkg / "__init__.py"
        init.write_text(
            '"""Generated from proto/tli/v1 by grpcio-tools at build time; never edit."""\n'
            if pkg == stub_dir
            else "",
            encoding="utf-8",
        )
    dotted = "tli_client._proto.tli.v1"
    for generated in (stub_dir / API_PACKAGE).iterdir():
        if generated.suffix not in (".py", ".pyi"):
            continue
        text = generated.read_text(encoding="utf-8")
        text = re.sub(r"^from tli\.v1 import", f"from {dotted} import", text, flags=re.MULTILINE)
        text = re.sub(r"^import tli\.v1\.", f"import {dotted}.", text, flags=re.MULTILINE)
        generated.write_text(text, encoding="utf-8")
    (stub_dir / "py.typed").write_text("", encoding="utf-8")


class BuildPyWithStubs(build_py):
    """``build_py`` that also generates the tli.v1 stubs (into the build dir)."""

    def run(self) -> None:
        super().run()
        version = self.distribution.metadata.version or "0"
        if getattr(self, "editable_mode", False):
            generate_stubs(HERE / "src", version)
        else:
            generate_stubs(Path(self.build_lib), version)

    def get_outputs(self, include_bytecode: bool = True) -> List[str]:  # type: ignore[override]
        outputs = list(super().get_outputs(include_bytecode))
        stub_dir = Path(self.build_lib) / STUB_ROOT
        if stub_dir.exists():
            outputs += [str(p) for p in stub_dir.rglob("*") if p.is_file()]
        return outputs


class SdistWithProtos(sdist):
    """An sdist carries the .proto files (./proto), so it builds outside the repository."""

    def make_release_tree(self, base_dir: str, files: List[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        target = Path(base_dir) / "proto" / API_PACKAGE
        target.mkdir(parents=True, exist_ok=True)
        for proto in api_protos(root):
            shutil.copy2(proto, target / proto.name)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos})
