"""A checkpoint that is not one, given to the weights loader (bert/model/weights.py): random
bytes, a truncated file, the right format with the wrong shapes or dtypes, missing or extra
tensors, a FIFO. Each is one `error:` line naming the file and exit status 2 from
`open-bert-convert` (nvidia, hf-import, tf, hf-export), nothing written, never a traceback; the
reader of `run.init_checkpoint` raises the one CheckpointError naming it (its rows in
tests/integration/test_bad_inputs.py show the training command's exit).

A good checkpoint of the same tiny model converts, so each refusal below is the garbage's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bert.core.errors import CheckpointError
from bert.model import BertForPretraining, ModelConfig
from bert.model.weights import load_checkpoint_file, to_hf_state_dict
from bert.convert import cli as convert_checkpoint

SHAPE = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
)


def model() -> BertForPretraining:
    torch.manual_seed(0)
    return BertForPretraining(ModelConfig(**SHAPE))


def good_state() -> dict[str, torch.Tensor]:
    return {k: v for k, v in model().state_dict().items() if k != "heads.decoder_weight"}


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def safetensors_bytes(state: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in state.items()})


def replaced(name: str, tensor: torch.Tensor) -> dict:
    return {"model": {**good_state(), name: tensor}}


WORD = "embeddings.word_embeddings.weight"
QUERY = "bert.encoder.layer.0.attention.self.query.weight"


def _torch_cases() -> dict[str, tuple]:
    """name -> (file bytes or a builder of them, fragment of the error)."""
    good = lambda: saved({"model": good_state()})  # noqa: E731
    return {
        "random_bytes": (lambda: bytes(range(7, 250)) * 20, "not a PyTorch checkpoint"),
        "empty_file": (lambda: b"", "not a PyTorch checkpoint"),
        "random_after_zip_magic": (lambda: b"PK" + bytes(range(256)) * 8, "truncated zip"),
        "random_after_pickle_magic": (lambda: b"\x80" + bytes(range(99, 255)) * 8, "cannot read"),
        "truncated_half": (lambda: good()[: len(good()) // 2], "truncated zip"),
        "truncated_head": (lambda: good()[:100], "truncated zip"),
        "wrong_shapes": (
            lambda: saved({"model": {k: torch.zeros(3, 5) for k in good_state()}}),
            "the model expects",
        ),
        "wrong_dtype_int": (
            lambda: saved(replaced(WORD, torch.zeros(4, 2, dtype=torch.int64))),
            "dtype torch.int64",
        ),
        "wrong_dtype_bool": (
            lambda: saved({"model": {k: v.bool() for k, v in good_state().items()}}),
            "dtype torch.bool",
        ),
        "wrong_dtype_complex": (
            lambda: saved({"model": {k: v.to(torch.complex64) for k, v in good_state().items()}}),
            "dtype torch.complex64",
        ),
        "wrong_dtype_float8": (
            lambda: saved(replaced(WORD, torch.zeros(40, 16, dtype=torch.float8_e4m3fn))),
            "float8",
        ),
        "nan_weights": (lambda: saved(replaced(WORD, torch.full((40, 16), float("nan")))), "NaN"),
        "scalar_tensor": (lambda: saved(replaced(WORD, torch.tensor(1.0))), "scalar"),
        "sparse_tensor": (lambda: saved(replaced(WORD, torch.zeros(40, 16).to_sparse())), "sparse"),
        "meta_tensor": (lambda: saved(replaced(WORD, torch.empty(40, 16, device="meta"))), "meta"),
        "missing_keys": (
            lambda: saved({"model": dict(list(good_state().items())[:3])}),
            "missing",
        ),
        "extra_key": (lambda: saved(replaced("heads.extra.weight", torch.zeros(2))), "unexpected"),
        "no_tensors": (lambda: saved({"model": {}}), "holds no tensors"),
        "not_a_dict": (lambda: saved([1, 2, 3]), "expected a state dict"),
        "a_non_tensor_value": (lambda: saved(replaced(WORD, [1.0])), "expected a state dict"),
        "hf_names_unmatched_qkv": (
            lambda: saved(
                {
                    QUERY: torch.zeros(16, 16),
                    QUERY.replace("query", "key"): torch.zeros(8, 16),
                    QUERY.replace("query", "value"): torch.zeros(16, 16),
                }
            ),
            "query, key and value weight shapes",
        ),
        "hf_names_unknown_tensor": (
            lambda: saved({"bert.encoder.layer.0.odd.weight": torch.zeros(2)}),
            "unexpected tensor",
        ),
    }


TORCH_CASES = _torch_cases()


def convert(argv: list[str]) -> tuple[int, str, str]:
    """open-bert-convert in this process: (status, stdout, stderr); an escaping exception fails
    the test with its traceback, which is what a user would have seen."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = convert_checkpoint.main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def assert_refused(code: int, stderr: str, path: Path, fragment: str, out: Path) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert str(path) in lines[0] and fragment in lines[0], lines[0]
    assert not out.exists()


@pytest.fixture()
def shape_file(tmp_path) -> Path:
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(SHAPE))
    return path


def test_a_good_checkpoint_converts(tmp_path, shape_file):
    """The control: the same model's checkpoint, in each format, converts."""
    (tmp_path / "good.pt").write_bytes(saved({"model": good_state()}))
    out = tmp_path / "out.pt"
    assert (
        convert(
            [
                "nvidia",
                str(tmp_path / "good.pt"),
                "--out",
                str(out),
                "--bert-config",
                str(shape_file),
            ]
        )[0]
        == 0
    )
    load_checkpoint_file(model(), str(out))


def test_hf_names_with_their_integer_buffer_convert(tmp_path, shape_file):
    """HF's older files hold `position_ids`, an int64 buffer the import skips: no weight, so
    no dtype refusal."""
    hf = to_hf_state_dict(model().state_dict(), SHAPE["vocab_size"])
    hf["bert.embeddings.position_ids"] = torch.arange(16)[None]
    (tmp_path / "pytorch_model.bin").write_bytes(saved(hf))
    out = tmp_path / "out.pt"
    argv = ["hf-import", str(tmp_path / "pytorch_model.bin"), "--out", str(out)]
    assert convert([*argv, "--bert-config", str(shape_file)])[0] == 0
    load_checkpoint_file(model(), str(out))


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
@pytest.mark.parametrize("command", ["nvidia", "hf-import", "unsafe"])
def test_a_garbage_pt_is_one_error_line(tmp_path, shape_file, case, command):
    build, fragment = TORCH_CASES[case]
    path, out = tmp_path / "phase1.pt", tmp_path / "out.pt"
    path.write_bytes(build())
    argv = ["nvidia" if command == "unsafe" else command, str(path), "--out", str(out)]
    argv += ["--bert-config", str(shape_file)] + (["--unsafe-load"] if command == "unsafe" else [])
    code, _, err = convert(argv)
    if command == "unsafe" and case == "random_after_pickle_magic":
        fragment = "cannot read"  # the full unpickler's own words
    assert_refused(code, err, path, fragment, out)


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_init_checkpoint_reader_names_the_file(tmp_path, case):
    """run.init_checkpoint's path: read (before the run's log opens), then loaded."""
    build, fragment = TORCH_CASES[case]
    path = tmp_path / "init.pt"
    path.write_bytes(build())
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint_file(model(), str(path))
    assert str(path) in str(refused.value) and fragment in str(refused.value)


@pytest.mark.parametrize(
    "case",
    ["random", "truncated", "wrong_dtype", "wrong_shape", "missing_keys", "header_says_huge"],
)
def test_a_garbage_safetensors_is_one_error_line(tmp_path, shape_file, case):
    pytest.importorskip("safetensors")
    good = safetensors_bytes(good_state())
    data, fragment = {
        "random": (bytes(range(3, 200)) * 9, "cannot read as safetensors"),
        "truncated": (good[: len(good) // 2], "cannot read as safetensors"),
        "wrong_dtype": (
            safetensors_bytes({k: v.to(torch.int32) for k, v in good_state().items()}),
            "dtype torch.int32",
        ),
        "wrong_shape": (safetensors_bytes({**good_state(), WORD: torch.zeros(3, 3)}), "has shape"),
        "missing_keys": (safetensors_bytes({WORD: good_state()[WORD]}), "missing"),
        "header_says_huge": ((2**62).to_bytes(8, "little") + b"{}", "cannot read as safetensors"),
    }[case]
    path, out = tmp_path / "model.safetensors", tmp_path / "out.pt"
    path.write_bytes(data)
    code, _, err = convert(
        ["hf-import", str(path), "--out", str(out), "--bert-config", str(shape_file)]
    )
    assert_refused(code, err, path, fragment, out)


@pytest.mark.parametrize("kind", ["fifo", "folder_of_garbage"])
def test_what_is_no_file_is_one_error_line(tmp_path, shape_file, kind):
    out = tmp_path / "out.pt"
    if kind == "fifo":  # would block the open, or be read forever
        path = tmp_path / "phase1.pt"
        os.mkfifo(path)
        command, fragment = "nvidia", "a FIFO"
    else:  # an HF folder whose weights file is garbage
        path = tmp_path / "hf"
        path.mkdir()
        (path / "pytorch_model.bin").write_bytes(b"garbage" * 10)
        command, fragment = "hf-import", "not a PyTorch checkpoint"
    code, _, err = convert(
        [command, str(path), "--out", str(out), "--bert-config", str(shape_file)]
    )
    assert_refused(code, err, path, fragment, out)


def test_hf_export_of_garbage_is_one_error_line(tmp_path, shape_file):
    path, out = tmp_path / "trainer.pt", tmp_path / "hf"
    path.write_bytes(saved(replaced(WORD, torch.zeros(40, 16, dtype=torch.int8))))
    code, _, err = convert(
        ["hf-export", str(path), "--out", str(out), "--bert-config", str(shape_file)]
    )
    assert_refused(code, err, path, "dtype torch.int8", out)


# -- TF1 (`open-bert-convert tf`): TensorFlow stood in for, as tests/tools/test_convert.py does --


def fake_tensorflow(arrays: dict[str, np.ndarray] | None, error: Exception | None = None):
    """A module with tf.train.load_checkpoint: a reader of `arrays`, or one raising `error`
    (TensorFlow raises its own DataLossError / NotFoundError on a damaged prefix)."""

    def load_checkpoint(prefix):
        if error is not None:
            raise error
        return types.SimpleNamespace(
            get_variable_to_shape_map=lambda: {k: v.shape for k, v in arrays.items()},
            get_tensor=lambda name: arrays[name],
        )

    return types.SimpleNamespace(train=types.SimpleNamespace(load_checkpoint=load_checkpoint))


class DataLossError(Exception):
    pass


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("damaged", "DataLossError"),
        ("string_variable", "not floating-point weights"),
        ("integer_variable", "not floating-point weights"),
        ("missing_variables", "missing"),
    ],
)
def test_a_garbage_tf_checkpoint_is_one_error_line(
    tmp_path, shape_file, monkeypatch, case, fragment
):
    word = "bert/embeddings/word_embeddings"
    arrays = {
        "damaged": None,
        "string_variable": {word: np.array(["a", "b"])},
        "integer_variable": {word: np.zeros((40, 16), np.int32)},
        "missing_variables": {word: np.zeros((40, 16), np.float32)},
    }[case]
    error = DataLossError("truncated record at 1234") if case == "damaged" else None
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tensorflow(arrays, error))
    prefix, out = tmp_path / "model.ckpt-28252", tmp_path / "out.pt"
    code, _, err = convert(["tf", str(prefix), "--out", str(out), "--bert-config", str(shape_file)])
    assert_refused(code, err, prefix, fragment, out)
