from __future__ import annotations

import json
from pathlib import Path

import pytest

from atom.model.catalog import ModelKind, served_models
from atom.text import parsers
from atom.vocabulary.choices import (
    LoraModule,
    Quantization,
    ReasoningParser,
    ToolCallParser,
)
from atom.vocabulary.config import Settings, setting_fields, unknown_env


def test_environment_variables_parse_by_field_type() -> None:
    s = Settings.from_env({
        "ATOM_MAX_NUM_SEQS": "8", "ATOM_GPU_MEMORY_UTILIZATION": "0.5",
        "ATOM_ENABLE_PREFIX_CACHING": "false", "ATOM_SERVED_MODEL_NAME": "smol",
    })  # fmt: skip
    assert (s.max_num_seqs, s.gpu_memory_utilization, s.enable_prefix_caching) == (8, 0.5, False)
    assert served_models(s)[0].name == "smol"
    assert Settings.from_env(s.to_env()) == s
    with pytest.raises(ValueError, match="true or false"):
        Settings.from_env({"ATOM_ENABLE_PREFIX_CACHING": "maybe"})


def test_default_models_and_readable_names() -> None:
    defaults = served_models(Settings())
    assert [(s.name, s.kind) for s in defaults] == [
        ("SmolLM2-135M-Instruct", ModelKind.GENERATE),
        ("all-MiniLM-L6-v2", ModelKind.EMBED),
        ("whisper-base", ModelKind.TRANSCRIBE),
    ]
    assert served_models(Settings(model=("/models/Qwen3-0.6B/",)))[0].name == "Qwen3-0.6B"


def test_several_models_pair_with_their_names_and_say_what_they_do(tmp_path: Path) -> None:
    encoder, ranker = tmp_path / "enc", tmp_path / "ranker"
    speech = tmp_path / "speech"
    for folder, config in (
        (encoder, {"architectures": ["BertModel"]}),
        (ranker, {"architectures": ["BertForSequenceClassification"], "num_labels": 1}),
        (speech, {"architectures": ["WhisperForConditionalGeneration"]}),
    ):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    env = {
        "ATOM_MODEL": f"SmolLM2-135M-Instruct,{encoder},{ranker},{speech}",
        "ATOM_SERVED_MODEL_NAME": "chat",
    }
    specs = served_models(Settings.from_env(env))
    assert [(s.name, s.kind) for s in specs] == [
        ("chat", ModelKind.GENERATE),
        ("enc", ModelKind.EMBED),
        ("ranker", ModelKind.SCORE),
        ("speech", ModelKind.TRANSCRIBE),
    ]
    with pytest.raises(ValueError, match="one name"):
        served_models(Settings(model=(str(encoder), str(encoder))))


def test_every_setting_has_a_flag_with_its_help_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from atom.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in setting_fields():
        assert f"--{f.name.replace('_', '-')}" in text and f"ATOM_{f.name.upper()}" in text
    wait = "seconds a request may wait in the queue; then a 503"
    assert f"{wait} (env ATOM_MAX_QUEUE_WAIT; default: 120.0)" in text


def test_unknown_atom_variables_are_named() -> None:
    env = {"ATOM_MAX_NUM_SEQS": "4", "ATOM_MAX_NUM_SEQ": "4", "HOME": "/"}
    assert unknown_env(env) == ["ATOM_MAX_NUM_SEQ"]


def test_lists_take_vllm_json_or_commas_and_round_trip() -> None:
    as_json = Settings.from_env({"ATOM_ALLOWED_ORIGINS": '["https://a.example", "http://b"]'})
    as_commas = Settings.from_env({"ATOM_ALLOWED_ORIGINS": "https://a.example, http://b"})
    assert as_json.allowed_origins == as_commas.allowed_origins == ("https://a.example", "http://b")
    assert Settings.from_env(as_json.to_env()) == as_json
    with pytest.raises(ValueError, match="ATOM_API_KEY"):
        Settings.from_env({"ATOM_API_KEY": '["a", 1]'})


def test_list_flags_repeat_and_take_either_form() -> None:
    from atom.cli import parser, settings_of

    args = parser().parse_args(
        ["serve", "--api-key", "a", "--api-key", '["b", "c"]', "--allowed-origins", "x,y"]
    )
    settings = settings_of(args)
    assert settings.api_key == ("a", "b", "c") and settings.allowed_origins == ("x", "y")
    assert settings.allowed_methods == ("*",)  # the default, as vLLM


def test_a_switch_flag_alone_means_true_and_takes_a_value_too() -> None:
    from atom.cli import parser, settings_of

    assert settings_of(parser().parse_args(["serve", "--no-webui"])).no_webui is True
    assert settings_of(parser().parse_args(["serve"])).no_webui is False
    args = parser().parse_args(["serve", "--enable-prefix-caching", "false", "--no-webui"])
    settings = settings_of(args)
    assert settings.enable_prefix_caching is False and settings.no_webui is True


def test_a_models_file_lists_models_in_yaml_or_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text(
        "models:\n  - model: SmolLM2-135M-Instruct\n    served_model_name: chat\n"
        "  - all-MiniLM-L6-v2\n"
    )
    json_file = tmp_path / "more.json"
    json_file.write_text(json.dumps([{"model": "all-MiniLM-L6-v2", "served_model_name": "emb"}]))
    specs = served_models(Settings(model=(str(yaml_file), str(json_file))))
    assert [(s.name, s.source, s.kind) for s in specs] == [
        ("chat", "SmolLM2-135M-Instruct", ModelKind.GENERATE),
        ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2", ModelKind.EMBED),
        ("emb", "all-MiniLM-L6-v2", ModelKind.EMBED),
    ]
    (tmp_path / "bad.yaml").write_text("models: {not: a list}\n")
    with pytest.raises(ValueError, match="list of models"):
        served_models(Settings(model=(str(tmp_path / "bad.yaml"),)))


def test_every_setting_is_documented_with_its_flag_and_variable() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    missing = [
        f.name
        for f in setting_fields()
        if f"--{f.name.replace('_', '-')}" not in doc or f"ATOM_{f.name.upper()}" not in doc
    ]
    assert missing == []


def test_words_become_enums_and_json_its_records_when_the_settings_are_made() -> None:
    s = Settings.from_env({
        "ATOM_QUANTIZATION": "int8", "ATOM_ENABLE_LORA": "1", "ATOM_LORA_MODULES": "a=/x",
        "ATOM_DEFAULT_CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}',
        "ATOM_LIMIT_MM_PER_PROMPT": '{"image": 2}',
        "ATOM_MEDIA_IO_KWARGS": '{"video": {"num_frames": 16}}',
        "ATOM_SPECULATIVE_CONFIG": '{"method": "ngram", "num_speculative_tokens": 3}',
    })  # fmt: skip
    assert s.quantization is Quantization.INT8 and s.quantization == "int8"
    assert s.loras == (LoraModule(name="a", path="/x"),)
    assert s.chat_template_kwargs == {"enable_thinking": False}
    assert (s.media_limits.image, s.media_limits.video) == (2, 1)
    assert (s.video.fps, s.video.num_frames) == (2.0, 16)
    assert s.speculative is not None and s.speculative.num_speculative_tokens == 3
    assert Settings.from_env(s.to_env()) == s  # the parsed records are not variables
    assert Settings(quantization="int4").quantization is Quantization.INT4  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("quantization", "int3", "expected auto, off, int8 or int4, got 'int3'"),
        ("tool_call_parser", "hermez", "expected hermes, qwen,"),
        ("speculative_config", '{"method": "magic"}', "method must be one of"),
        ("default_chat_template_kwargs", "[1]", "expected a JSON object"),
        ("limit_mm_per_prompt", '{"vision": 1}', "only images, videos and audio are served"),
        ("media_io_kwargs", '{"video": {"fps": 0}}', "video fps must be a number in (0, 60]"),
        ("media_io_kwargs", '{"video": {"frames": 8}}', 'expected {"video": {"fps"'),
        ("lora_modules", "just-a-name", "expected name=path"),
        ("max_num_seqs", "many", "invalid literal"),
    ],
)
def test_a_bad_setting_names_its_flag_and_variable_however_it_came_in(
    name: str, raw: str, says: str
) -> None:
    from atom.cli import parser, settings_of

    named = f"--{name.replace('_', '-')} (ATOM_{name.upper()}): "
    with pytest.raises(ValueError) as by_env:
        Settings.from_env({f"ATOM_{name.upper()}": raw, "ATOM_ENABLE_LORA": "true"})
    with pytest.raises(ValueError) as by_flag:
        settings_of(parser().parse_args(["serve", f"--{name.replace('_', '-')}", raw]))
    for error in (by_env.value, by_flag.value):
        assert str(error).startswith(named) and says in str(error), error


def test_settings_that_need_another_are_refused_together() -> None:
    with pytest.raises(ValueError, match="--reasoning-budget needs --reasoning-parser"):
        Settings(reasoning_budget=10)
    with pytest.raises(ValueError, match="--lora-modules needs --enable-lora"):
        Settings(lora_modules=("a=/x",))


def test_every_parser_name_has_a_format_and_every_format_a_name() -> None:
    assert set(parsers.TOOL_PARSERS) == set(ToolCallParser)
    assert set(parsers.REASONING_PARSERS) == set(ReasoningParser)
