"""ATOM's GGUF tensor index (atom/model/forward/gguf_index.py) against the `gguf`
package's reader: the same tensors, types, shapes and bytes, for the default model and
a file of K-quant, float and integer tensors with its own alignment."""

from __future__ import annotations

from pathlib import Path

import gguf  # type: ignore[import-untyped]
import numpy as np
import pytest

from atom.model.forward import gguf_index
from atom.model.loader import default_model_path


def same_as_reference(path: Path) -> None:
    ours = gguf_index.tensors(path)
    theirs = gguf.GGUFReader(str(path)).tensors
    assert [t.name for t in ours] == [t.name for t in theirs]
    for mine, ref in zip(ours, theirs, strict=True):
        assert mine.tensor_type == ref.tensor_type, mine.name
        assert mine.data.shape == ref.data.shape and mine.data.dtype == ref.data.dtype
        assert np.array_equal(mine.data, ref.data), mine.name


def test_the_default_models_tensors_read_as_the_gguf_package_reads_them() -> None:
    same_as_reference(default_model_path())


def test_k_quant_float_and_integer_tensors_read_alike(tmp_path: Path) -> None:
    path = tmp_path / "k.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])  # a string array to skip
    writer.add_uint32("general.alignment", 64)
    rng = np.random.default_rng(0)
    for kind in (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K):
        size = gguf.GGML_QUANT_SIZES[kind][1]
        blocks = rng.integers(0, 255, (8, 2 * size)).astype(np.uint8)  # 8 rows of 512
        writer.add_tensor(kind.name, blocks, raw_dtype=kind)
    writer.add_tensor("norm", rng.standard_normal(7).astype(np.float32))
    writer.add_tensor("half", rng.standard_normal((3, 5)).astype(np.float16))
    writer.add_tensor("ids", np.arange(6, dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    same_as_reference(path)


def test_a_file_that_is_no_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError):
        gguf_index.tensors(path)
