"""A model folder is untrusted input: the tamper battery of the reliability audit, as a test.

One small model folder (``selfcal train`` on Blobs 1.7) is copied and tampered with many ways:
fields of ``config.json`` given wrong types, non-finite or out-of-range values, removed; the
weights truncated, replaced, cast to other dtypes, given a NaN, a missing or an extra tensor;
``selective.json`` and ``validation.npz`` damaged; ``calibrator.json`` replaced. Each tampered
folder is **re-sealed** (its checksums recomputed, as a deliberate editor would; without that
every edit is refused by its checksum, which ``test_train_predict.py`` checks) and given to
``selfcal predict`` three ways: plain, at the folder's stored default target and at a target it
did not store (so every file is read). Each outcome is counted:

* ``clear``: exit 2, one line naming the tampered folder's file;
* ``harmless``: the same output as the intact folder's;
* ``accepted-wrong``: exit 0 with a different output;
* ``crash``: any other exit (an unexpected error) or a traceback;
* ``unclear``: a one-line error that does not name the folder.

The last three must be zero.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.cli import TINY, blobs_csvs, run

from selfcal.cli import main
from selfcal.pipeline.model_dir import seal

Edit = Callable[[Path], None]


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> tuple[Path, Path]:
    """A trained CE folder and the test table."""
    files = blobs_csvs(tmp_path_factory.mktemp("blobs"))
    out = tmp_path_factory.mktemp("model") / "m"
    args = ["train", files["train"], "--val", files["val"], "--method", "ce", "--out", out]
    code = main([str(a) for a in [*args, *TINY]])
    assert code == 0
    return out, files["test"]


def reseal(folder: Path) -> None:
    """Recompute the folder's checksums (what a deliberate editor does)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (ValueError, OSError):
        return
    if not isinstance(config, dict):
        return
    body = {k: v for k, v in config.items() if k not in ("checksums", "checksum")}
    (folder / "config.json").write_text(json.dumps(seal(folder, body)))


def set_config(path: str, value: Any) -> Edit:
    """Set (``value`` not ``DELETE``) or delete the dotted ``path`` of ``config.json``."""

    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value(node[last]) if callable(value) else value
        (folder / "config.json").write_text(json.dumps(config))

    return edit


DELETE = object()


def write_bytes(name: str, data: Callable[[bytes], bytes]) -> Edit:
    def edit(folder: Path) -> None:
        (folder / name).write_bytes(data((folder / name).read_bytes()))

    return edit


def weights(change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Edit:
    def edit(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        path = folder / "model.safetensors"
        save_file(change(load_file(str(path))), path)

    return edit


def with_nan(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    first = next(iter(state))
    state[first] = state[first].clone()
    state[first].view(-1)[0] = float("nan")
    return state


def selective(change: Callable[[dict[str, Any]], Any]) -> Edit:
    def edit(folder: Path) -> None:
        doc = json.loads((folder / "selective.json").read_text())
        (folder / "selective.json").write_text(json.dumps(change(doc)))

    return edit


def set_threshold(value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        for t in doc["thresholds"]:
            t["threshold"] = value
        return doc

    return change


def validation(**arrays: Any) -> Edit:
    def edit(folder: Path) -> None:
        with np.load(folder / "validation.npz") as data:
            current = dict(data)
        current.update(arrays)
        np.savez(folder / "validation.npz", **{k: v for k, v in current.items() if v is not None})

    return edit


BIG = 10**9
CONFIG_CASES: dict[str, list[Any]] = {
    "features.mean": [[], "a", None, DELETE, lambda v: [float("nan")] * len(v), lambda v: v * 2],
    "features.std": [
        lambda v: [-s for s in v],
        lambda v: [0.0] * len(v),
        lambda v: [float("inf")] * len(v),
        lambda v: [float("nan")] * len(v),
        lambda v: v[:1],
        None,
    ],
    "features.columns": [[], None, lambda v: v[:1], lambda v: [v[0], v[0]], 7],
    "labels.classes": [[], None, lambda v: [v[0]] * len(v), lambda v: v[:-1], [1.5, 2.5], "ant"],
    "labels.column": [None, 5, DELETE],
    "architecture.hidden": [[BIG] * 3, [-1], ["a"], [], None, [16, 16], [0]],
    "architecture.n_features": ["a", -1, 0, BIG, None],
    "architecture.n_classes": ["a", -1, 0, 1, BIG],
    "architecture.name": ["resnet", None],
    "architecture.activation": ["tanh", 5],
    "architecture.dropout": [0.9, "a", -1],
    "calibrator": [None, "x", {"file": 5}, {}, DELETE],
    "format_version": [3, "2", None, DELETE],
    "features": [DELETE, [], "x"],
    "labels": [DELETE, []],
    "architecture": [DELETE, 5],
}
"""Each field of ``config.json`` and the values it is given (``DELETE`` removes it; a
callable maps the current value)."""

FILE_CASES: dict[str, Edit] = {
    "weights truncated to 8 bytes": write_bytes("model.safetensors", lambda b: b[:8]),
    "weights truncated in half": write_bytes("model.safetensors", lambda b: b[: len(b) // 2]),
    "weights random bytes": write_bytes("model.safetensors", lambda b: bytes(len(b))),
    "weights empty": write_bytes("model.safetensors", lambda b: b""),
    "weights bfloat16": weights(lambda s: {k: v.to(torch.bfloat16) for k, v in s.items()}),
    "weights float64": weights(lambda s: {k: v.double() for k, v in s.items()}),
    "weights a NaN": weights(with_nan),
    "weights missing tensor": weights(lambda s: dict(list(s.items())[1:])),
    "weights extra tensor": weights(lambda s: {**s, "extra": torch.zeros(3)}),
    "weights transposed": weights(
        lambda s: {k: v.T.contiguous() if v.ndim == 2 else v for k, v in s.items()}
    ),
    "selective threshold -5": selective(set_threshold(-5.0)),
    "selective threshold 2": selective(set_threshold(2.0)),
    "selective threshold NaN": selective(set_threshold(float("nan"))),
    "selective threshold list": selective(set_threshold([])),
    "selective no thresholds": selective(lambda d: {**d, "thresholds": []}),
    "selective no default": selective(lambda d: {"thresholds": d["thresholds"]}),
    "selective default kind x": selective(lambda d: {**d, "default": {"kind": "x", "target": 1}}),
    "selective default target 7": selective(
        lambda d: {**d, "default": {**d["default"], "target": 7}}
    ),
    "selective a list": selective(lambda d: []),
    "selective thresholds {}": selective(lambda d: {**d, "thresholds": {}}),
    "selective thresholds an object": selective(lambda d: {**d, "thresholds": {"a": 1}}),
    "selective thresholds true": selective(lambda d: {**d, "thresholds": True}),
    "selective a threshold a string": selective(lambda d: {**d, "thresholds": ["x"]}),
    "selective a threshold a list": selective(lambda d: {**d, "thresholds": [[0.5]]}),
    "selective threshold true": selective(set_threshold(True)),
    "selective default a list": selective(lambda d: {**d, "default": []}),
    "selective default target true": selective(
        lambda d: {**d, "default": {**d["default"], "target": True}}
    ),
    "selective an extra field": selective(lambda d: {**d, "extra": 1}),
    "selective not JSON": write_bytes("selective.json", lambda b: b"{x"),
    "validation not a zip": write_bytes("validation.npz", lambda b: b"PK garbage"),
    "validation no confidence": validation(confidence=None),
    "validation NaN confidence": validation(confidence=np.full(3, np.nan)),
    "validation confidence 7": validation(confidence=np.full(3, 7.0), correct=np.ones(3, bool)),
    "validation lengths differ": validation(correct=np.ones(2, bool)),
    "calibrator not JSON": write_bytes("calibrator.json", lambda b: b"[" * 100_000),
    "calibrator unknown class": write_bytes(
        "calibrator.json", lambda b: json.dumps({"class": "os.system"}).encode()
    ),
}
"""Tampered files other than ``config.json``."""


def cases() -> dict[str, Edit]:
    out = dict(FILE_CASES)
    for path, values in CONFIG_CASES.items():
        for i, value in enumerate(values):
            out[f"config {path} #{i}"] = set_config(path, value)
    return out


def outputs(capsys, folder: Path, test: Path, tmp: Path) -> tuple[list[Any], str]:
    """What ``predict`` gives plain, at the stored default target and at another one."""
    results, errors = [], []
    for i, extra in enumerate((["--target-accuracy", "0.95"], ["--target-accuracy", "0.77"])):
        out = tmp / f"p{i}.csv"
        out.unlink(missing_ok=True)
        code, _, err = run(capsys, "predict", folder, test, "--out", out, *extra)
        results.append((code, out.read_text() if code == 0 else None))
        if code:
            errors.append(err)
    return results, "".join(errors)


def outcome(results: list[Any], errors: str, expected: list[Any], folder: Path) -> str:
    if all(code == 0 for code, _ in results):
        return "harmless" if results == expected else "accepted-wrong"
    if any(code not in (0, 2) for code, _ in results) or "Traceback" in errors:
        return "crash"
    lines = [line for line in errors.splitlines() if line]
    return "clear" if all(str(folder) in line for line in lines) else "unclear"


def test_every_tampered_folder_is_refused_naming_its_file_or_predicts_the_same(
    capsys, intact, tmp_path
):
    folder, test = intact
    expected, err = outputs(capsys, folder, test, tmp_path)
    assert all(code == 0 for code, _ in expected), err
    counts: dict[str, list[str]] = {}
    for name, edit in cases().items():
        copy = tmp_path / "tampered"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        edit(copy)
        reseal(copy)
        results, errors = outputs(capsys, copy, test, tmp_path)
        counts.setdefault(outcome(results, errors, expected, copy), []).append(
            f"{name}: {errors.strip()[:300]}"
        )
    bad = {k: v for k, v in counts.items() if k not in ("clear", "harmless")}
    summary = {k: len(v) for k, v in counts.items()}
    assert not bad, f"{summary}\n" + "\n".join(f"{k}: {line}" for k, v in bad.items() for line in v)
    assert summary["clear"] >= 80, summary


def test_selective_json_with_thresholds_an_object_names_the_file_and_field(
    capsys, intact, tmp_path
):
    """The audit's case: ``thresholds: {"a": 1}`` ended in ``AttributeError: 'str' object has
    no attribute 'get'`` (exit 1, no file named)."""
    folder, test = intact
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    selective(lambda d: {**d, "thresholds": {"a": 1}})(copy)
    reseal(copy)
    code, _, err = run(
        capsys, "predict", copy, test, "--out", tmp_path / "p.csv", "--target-accuracy", "0.9"
    )
    assert code == 2
    assert err.strip() == (
        f"error: {copy / 'selective.json'}: thresholds must be a non-empty list, got {{'a': 1}}"
    )


@pytest.mark.parametrize(
    "name", ["model.safetensors", "calibrator.json", "selective.json", "validation.npz"]
)
def test_a_checksummed_file_that_is_missing_is_called_missing(capsys, intact, tmp_path, name):
    """A folder without a file whose checksum config.json records was said to be "edited or
    damaged"; the file is absent, and the message now says so."""
    folder, test = intact
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    (copy / name).unlink()
    code, _, err = run(capsys, "predict", copy, test, "--out", tmp_path / "p.csv")
    assert code == 2
    assert f"{copy / name}: missing, though selfcal train wrote it" in err
    assert "edited" not in err and len(err.strip().splitlines()) == 1
