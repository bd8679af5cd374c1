"""Qwen2-Audio's audio rows: transformers' Qwen2-Audio has no `get_audio_features`, so
this does what its forward does before placing them: the Whisper encoder over each
window (padded frames masked), the projector, and each window's rows cut to the frames
the audio filled."""

from __future__ import annotations

from typing import Any

import torch


def qwen2_audio_features(
    model: Any, input_features: torch.Tensor, feature_attention_mask: torch.Tensor
) -> Any:
    """`model`: Qwen2AudioModel (its language model detached). Its `pooler_output`:
    the windows' filled rows, flattened in order."""
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    tower = model.audio_tower
    frames, kept = tower._get_feat_extract_output_lengths(feature_attention_mask.sum(-1))
    windows, _, mel_frames = input_features.shape
    steps = torch.arange((mel_frames - 2) // 2 + 1, device=frames.device)
    filled = (steps[None, :] < frames[:, None]).long()
    dummy = torch.zeros((windows, steps.numel(), 1), dtype=input_features.dtype)
    mask = create_bidirectional_mask(
        config=tower.config, inputs_embeds=dummy.to(input_features.device), attention_mask=filled
    )
    hidden = tower(input_features, attention_mask=mask).last_hidden_state
    rows = model.multi_modal_projector(hidden)
    used = torch.arange(rows.shape[1], device=rows.device)[None, :] < kept.to(rows.device)[:, None]
    return BaseModelOutputWithPooling(last_hidden_state=rows, pooler_output=rows[used])
