"""A Whisper model converted for CTranslate2 (faster-whisper's form), back to
transformers' `WhisperForConditionalGeneration`: its shapes and its state dict.

CTranslate2's Whisper converter (its `WhisperLoader`) renames every weight and fuses
the self-attention's q, k and v projections into one (`linear_0`, k's missing bias
as zeros) and the cross-attention's k and v (`linear_1`); the output projection is
the token embedding (an alias). Undone here name by name; nothing is lost, so a
float32 model comes back bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atom.model.whisper.ct2 import Ct2Error, Ct2Model


@dataclass(frozen=True, slots=True, kw_only=True)
class WhisperShape:
    """What transformers' `WhisperConfig` needs that the weights tell."""

    vocab_size: int
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    decoder_layers: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_source_positions: int
    max_target_positions: int


def shape_of(model: Ct2Model) -> WhisperShape:
    v = model.variables
    if model.spec != "WhisperSpec":
        raise Ct2Error(f"a {model.spec}, not a Whisper model")
    layers = {
        side: sum(
            1
            for name in v
            if name.startswith(f"{side}/layer_") and name.endswith("/ffn/linear_0/weight")
        )
        for side in ("encoder", "decoder")
    }
    vocab, d_model = v["decoder/embeddings/weight"].shape
    return WhisperShape(
        vocab_size=vocab,
        num_mel_bins=v["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=layers["encoder"],
        encoder_attention_heads=int(v["encoder/num_heads"]),
        decoder_layers=layers["decoder"],
        decoder_attention_heads=int(v["decoder/num_heads"]),
        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=v["decoder/position_encodings/encodings"].shape[0],
    )


def _linear(v: dict[str, torch.Tensor], ct2: str, hf: str) -> dict[str, torch.Tensor]:
    return {f"{hf}.weight": v[f"{ct2}/weight"], f"{hf}.bias": v[f"{ct2}/bias"]}


def _norm(v: dict[str, torch.Tensor], ct2: str, hf: str) -> dict[str, torch.Tensor]:
    return {f"{hf}.weight": v[f"{ct2}/gamma"], f"{hf}.bias": v[f"{ct2}/beta"]}


def _split(
    v: dict[str, torch.Tensor], ct2: str, hf: str, names: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """A fused projection back to its parts; k's bias (zeros in the fused one) is dropped."""
    out: dict[str, torch.Tensor] = {}
    weights = v[f"{ct2}/weight"].chunk(len(names))
    biases = v[f"{ct2}/bias"].chunk(len(names))
    for name, weight, bias in zip(names, weights, biases, strict=True):
        out[f"{hf}.{name}.weight"] = weight
        if name == "k_proj":
            if bias.any():
                raise Ct2Error(f"{ct2}: a key projection with a bias, which Whisper has not")
        else:
            out[f"{hf}.{name}.bias"] = bias
    return out


def _layer(
    v: dict[str, torch.Tensor], ct2: str, hf: str, *, cross: bool
) -> dict[str, torch.Tensor]:
    out = {
        **_split(
            v, f"{ct2}/self_attention/linear_0", f"{hf}.self_attn", ("q_proj", "k_proj", "v_proj")
        ),
        **_linear(v, f"{ct2}/self_attention/linear_1", f"{hf}.self_attn.out_proj"),
        **_norm(v, f"{ct2}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm"),
        **_linear(v, f"{ct2}/ffn/linear_0", f"{hf}.fc1"),
        **_linear(v, f"{ct2}/ffn/linear_1", f"{hf}.fc2"),
        **_norm(v, f"{ct2}/ffn/layer_norm", f"{hf}.final_layer_norm"),
    }
    if cross:
        out |= {
            **_linear(v, f"{ct2}/attention/linear_0", f"{hf}.encoder_attn.q_proj"),
            **_split(v, f"{ct2}/attention/linear_1", f"{hf}.encoder_attn", ("k_proj", "v_proj")),
            **_linear(v, f"{ct2}/attention/linear_2", f"{hf}.encoder_attn.out_proj"),
            **_norm(v, f"{ct2}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm"),
        }
    return out


def state_dict(model: Ct2Model) -> dict[str, torch.Tensor]:
    """transformers' names and tensors (the output projection tied to the embedding)."""
    v, shape = model.variables, shape_of(model)
    out = {
        **_linear(v, "encoder/conv1", "model.encoder.conv1"),
        **_linear(v, "encoder/conv2", "model.encoder.conv2"),
        "model.encoder.embed_positions.weight": v["encoder/position_encodings/encodings"],
        **_norm(v, "encoder/layer_norm", "model.encoder.layer_norm"),
        "model.decoder.embed_tokens.weight": v["decoder/embeddings/weight"],
        "model.decoder.embed_positions.weight": v["decoder/position_encodings/encodings"],
        **_norm(v, "decoder/layer_norm", "model.decoder.layer_norm"),
    }
    for i in range(shape.encoder_layers):
        out |= _layer(v, f"encoder/layer_{i}", f"model.encoder.layers.{i}", cross=False)
    for i in range(shape.decoder_layers):
        out |= _layer(v, f"decoder/layer_{i}", f"model.decoder.layers.{i}", cross=True)
    return out
