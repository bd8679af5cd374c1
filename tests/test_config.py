from __future__ import annotations

import pytest

from atom.config import Settings


def test_environment_variables_parse_by_field_type() -> None:
    s = Settings.from_env({
        "ATOM_MAX_NUM_SEQS": "8", "ATOM_GPU_MEMORY_UTILIZATION": "0.5",
        "ATOM_ENABLE_PREFIX_CACHING": "false", "ATOM_SERVED_MODEL_NAME": "smol",
    })  # fmt: skip
    assert (s.max_num_seqs, s.gpu_memory_utilization, s.enable_prefix_caching) == (8, 0.5, False)
    assert s.model_name == "smol"
    assert Settings.from_env(s.to_env()) == s
    with pytest.raises(ValueError, match="true or false"):
        Settings.from_env({"ATOM_ENABLE_PREFIX_CACHING": "maybe"})


def test_default_model_name_is_readable() -> None:
    assert Settings().model_name == "SmolLM2-135M-Instruct"
    assert Settings(model="/models/Qwen3-0.6B/").model_name == "Qwen3-0.6B"
