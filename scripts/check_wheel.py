"""Install selfcal as a user outside this repository would, and use it.

Builds the sdist and the wheel (``python -m build``, the wheel from the sdist) into a temporary
folder, checks them (``twine check --strict``), checks that the wheel holds every file tracked
under ``src/selfcal`` (the bundled examples, ``py.typed``, any data a module reads at run time),
installs it with the ``full`` extra into a fresh virtual environment in that folder (torch
2.13.0 first, the CPU wheel, as the README says) and, from a working folder outside the checkout,
runs the README's Python snippets on ``val.npz`` / ``test.npz`` made from the bundled digits
logits, ``selfcal compare`` on a set made the same way and ``selfcal reproduce bo4sc --quick``.
Each step prints one ``wheel: ...`` line; the first failure ends the check with exit status 1
after the failed command's output. Nothing is written into the checkout.

CI runs it (the README's test command). Lean by design: the build tools and pip are those of
the Python running this script (``pip --python`` installs into the new environment, which gets
no pip of its own) and nothing is byte-compiled at install (``--no-compile``: Python compiles
what it imports).

Usage: ``python scripts/check_wheel.py [--keep]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "selfcal"
TORCH = "torch==2.13.0"  # the CPU wheel (README, Install)
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)

# Written beside the README's snippets in the working folder: the user's val.npz / test.npz
# and a sets/ folder, from the installed package's bundled examples.
PREPARE = """\
import shutil, sys
from pathlib import Path
import selfcal
from selfcal.examples import example_path

if not Path(selfcal.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()):
    sys.exit(f"selfcal imported from {selfcal.__file__}, not from the environment {sys.prefix}")
Path("sets").mkdir()
for split in ("val", "test"):
    shutil.copy(example_path(f"digits_{split}"), f"{split}.npz")
    shutil.copy(example_path(f"digits_{split}"), Path("sets") / f"{split}.npz")
print(selfcal.__file__)
"""


class CheckFailed(Exception):
    """A step failed; the message is the one-line reason."""


_last = time.perf_counter()


def log(message: str) -> None:
    """One ``wheel: ...`` line ending with the seconds since the previous one."""
    global _last
    now = time.perf_counter()
    print(f"wheel: {message} [{now - _last:.1f} s]", flush=True)
    _last = now


def run(step: str, command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """``command``'s stdout and stderr together; :class:`CheckFailed` naming ``step`` when it
    exits non-zero (its output printed first)."""
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        print(done.stdout, end="", flush=True)
        raise CheckFailed(f"{step} failed (exit {done.returncode}): {' '.join(command)}")
    return done.stdout


def tracked_package_files() -> list[str]:
    """Paths relative to ``src/`` of the files git tracks under ``src/selfcal`` (every file
    there, ``__pycache__`` aside, when this is not a git checkout)."""
    src = ROOT / "src"
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", f"src/{PACKAGE}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        files = [Path(name).relative_to("src").as_posix() for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = [
            path.relative_to(src).as_posix()
            for path in (src / PACKAGE).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        ]
    if not files:
        raise CheckFailed(f"no files found under {src / PACKAGE}")
    return sorted(files)


def build(dist: Path) -> tuple[Path, list[str]]:
    """Build the sdist and the wheel into ``dist``; check them; the wheel and its file names."""
    run("build", [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=dist)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckFailed(f"build made {[p.name for p in dist.iterdir()]}, not one wheel and sdist")
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tracked = tracked_package_files()
    missing = [name for name in tracked if name not in set(names)]
    if missing:
        raise CheckFailed(
            f"{wheel.name} lacks {len(missing)} file(s) tracked under src/{PACKAGE}: "
            + ", ".join(missing[:5])
            + (", ..." if len(missing) > 5 else "")
        )
    data = [name for name in tracked if not name.endswith(".py")]
    log(
        f"built {wheel.name} ({len(names)} files; all {len(tracked)} tracked under "
        f"src/{PACKAGE} in it, {len(data)} of them data: {', '.join(data)}) and {sdists[0].name}"
    )
    twine = [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdists[0])]
    run("twine check", twine, cwd=dist)
    log("twine check --strict PASSED")
    return wheel, names


def install(wheel: Path, env_dir: Path) -> Path:
    """A fresh virtual environment in ``env_dir`` with torch and ``selfcal[full]`` from
    ``wheel``; its Python."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]
    run(f"pip install {TORCH}", [*pip, TORCH], cwd=env_dir)
    run("pip install the wheel", [*pip, f"{PACKAGE}[full] @ {wheel.as_uri()}"], cwd=env_dir)
    log(f"installed {wheel.name}[full] with {TORCH} in {env_dir}")
    return python


def use(python: Path, work: Path) -> None:
    """The README's snippets, ``compare`` and ``reproduce bo4sc --quick`` in ``work``."""
    # The user's shell: no PYTHONPATH to this checkout, the environment's scripts on PATH.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    selfcal = str(python.parent / "selfcal")
    (work / "prepare.py").write_text(PREPARE, encoding="utf-8")
    imported = run("bundled examples", [str(python), "prepare.py"], cwd=work, env=env).strip()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippets = [body for lang, body in BLOCK.findall(readme) if lang == "python"]
    if not snippets:
        raise CheckFailed("README.md has no python block")
    (work / "readme.py").write_text("\n".join(snippets), encoding="utf-8")
    printed = run("README python snippets", [str(python), "readme.py"], cwd=work, env=env)
    try:
        before, after = (float(line) for line in printed.splitlines()[:2])
    except ValueError as error:
        raise CheckFailed(f"the quickstart printed {printed[:200]!r}, not two ECEs") from error
    if not after < before:
        raise CheckFailed(f"the quickstart's ECE did not drop: {before} -> {after}")
    log(
        f"quickstart OK (the README's {len(snippets)} python blocks, selfcal from {imported}; "
        f"test ECE {before:.4f} -> {after:.4f})"
    )
    run("selfcal compare", [selfcal, "compare", "sets", "--out", "compared"], cwd=work, env=env)
    if not (work / "compared" / "README.md").is_file():
        raise CheckFailed("selfcal compare wrote no compared/README.md")
    log("selfcal compare sets OK (report compared/README.md)")
    run("selfcal reproduce", [selfcal, "reproduce", "bo4sc", "--quick"], cwd=work, env=env)
    if not (work / "selfcal-report" / "bo4sc" / "README.md").is_file():
        raise CheckFailed("selfcal reproduce bo4sc --quick wrote no selfcal-report/bo4sc/README.md")
    log("selfcal reproduce bo4sc --quick OK (report selfcal-report/bo4sc/README.md)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="selfcal-wheel-")).resolve()
    if tmp.is_relative_to(ROOT):
        raise SystemExit(f"the temporary folder {tmp} lies inside the checkout {ROOT}")
    try:
        for name in ("dist", "env", "work"):
            (tmp / name).mkdir()
        wheel, _ = build(tmp / "dist")
        python = install(wheel, tmp / "env")
        use(python, tmp / "work")
    except CheckFailed as failure:
        print(f"wheel: FAILED: {failure}", file=sys.stderr, flush=True)
        return 1
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"wheel: all checks passed in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
