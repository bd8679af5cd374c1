"""Whisper's decoder over many transcription windows at once.

Each window being decoded holds a slot: its encoder's cross-attention keys and values,
computed once when the window is encoded, and its own tokens' self-attention keys and
values, written as its tokens are fed (at most `max_target_positions`, 448). One
`step` feeds any number of slots any number of tokens each (a window's prompt, or one
token a step) in one forward: the batch is padded to its longest feed, and each slot
attends to its own positions only. The weights are transformers'
`WhisperForConditionalGeneration`'s, used as they are (the q projection scaled before
the product, as transformers and OpenAI's code do, for the same rounding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import WhisperForConditionalGeneration
from transformers.models.whisper.modeling_whisper import WhisperDecoderLayer


class WhisperSlots:
    def __init__(self, model: WhisperForConditionalGeneration, num_slots: int) -> None:
        config = model.config
        self.model = model.eval()
        self.num_heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.num_heads
        weight = model.model.decoder.embed_tokens.weight
        layers = config.decoder_layers
        self_shape = (layers, num_slots, self.num_heads, config.max_target_positions, self.head_dim)
        cross_shape = (
            layers,
            num_slots,
            self.num_heads,
            config.max_source_positions,
            self.head_dim,
        )
        options = {"dtype": weight.dtype, "device": weight.device}
        self._self_k, self._self_v = (
            torch.zeros(self_shape, **options),
            torch.zeros(self_shape, **options),
        )
        self._cross_k, self._cross_v = (
            torch.zeros(cross_shape, **options),
            torch.zeros(cross_shape, **options),
        )
        self.lengths = [0] * num_slots  # tokens fed to each slot's window so far
        self.max_tokens = config.max_target_positions

    @property
    def num_slots(self) -> int:
        return len(self.lengths)

    @torch.inference_mode()
    def encode(self, slots: list[int], features: torch.Tensor) -> None:
        """Start a window in each slot: features [len(slots), mel bins, 3000] (30 s)."""
        encoded = self.model.model.encoder(features.to(self._self_k)).last_hidden_state
        index = torch.tensor(slots, device=encoded.device)
        for i, layer in enumerate(self.model.model.decoder.layers):
            attention = layer.encoder_attn
            self._cross_k[i, index] = self._heads(attention.k_proj(encoded))
            self._cross_v[i, index] = self._heads(attention.v_proj(encoded))
        for slot in slots:
            self.lengths[slot] = 0

    def restart(self, slot: int) -> None:
        """Decode the slot's window again from its first token (its audio's cross-attention
        kept)."""
        self.lengths[slot] = 0

    @torch.inference_mode()
    def step(self, slots: list[int], tokens: list[list[int]]) -> torch.Tensor:
        """Feed tokens[b] to slot slots[b]; the logits after each one's last token,
        [len(slots), vocab], float32."""
        x, counts = self._forward(slots, tokens)
        rows = torch.arange(len(slots), device=x.device)
        last = self.model.model.decoder.layer_norm(x[rows, counts - 1])
        return self.model.proj_out(last).float()

    @torch.inference_mode()
    def cross_logits(
        self, slot: int, tokens: list[int], layers: frozenset[int]
    ) -> dict[int, torch.Tensor]:
        """`tokens` fed to `slot` from its start (its window has ended: its own keys and
        values are written over): each of `layers`' cross-attention logits, [heads,
        len(tokens), source positions], its queries scaled as the attention scales them."""
        self.lengths[slot] = 0
        found: dict[int, torch.Tensor] = {}
        self._forward([slot], [tokens], (layers, found))
        return found

    def _forward(
        self,
        slots: list[int],
        tokens: list[list[int]],
        record: tuple[frozenset[int], dict[int, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder over each slot's feed: the last layer's states [slots, width,
        d_model] and each feed's length; `record` keeps some layers' cross-attention
        logits (of a single slot)."""
        decoder = self.model.model.decoder
        device = self._self_k.device
        starts = torch.tensor([self.lengths[s] for s in slots], device=device)
        counts = torch.tensor([len(t) for t in tokens], device=device)
        if int((starts + counts).max()) > self.max_tokens:
            raise ValueError(f"a window holds at most {self.max_tokens} tokens")
        width = int(counts.max())
        ids = torch.tensor([t + [0] * (width - len(t)) for t in tokens], device=device)
        positions = (starts[:, None] + torch.arange(width, device=device)).clamp(
            max=self.max_tokens - 1
        )
        x = (
            decoder.embed_tokens(ids) * decoder.embed_scale
            + decoder.embed_positions.weight[positions]
        )
        index = torch.tensor(slots, device=device)
        mask = self._self_mask(starts, counts, width)
        for i, layer in enumerate(decoder.layers):
            x = x + self._self_attention(i, layer, x, index, positions, counts, mask)
            x = x + self._cross_attention(i, layer, x, slots, record)
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        for slot, count in zip(slots, counts.tolist(), strict=True):
            self.lengths[slot] += count
        return x, counts

    def _cross_attention(
        self,
        i: int,
        layer: WhisperDecoderLayer,
        x: torch.Tensor,
        slots: list[int],
        record: tuple[frozenset[int], dict[int, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """One layer's cross-attention, each window over its own encoder states: a slot's
        keys and values are read in place (gathering every slot's 1,500 rows into a
        batch copied 50 MB a layer and was most of a step's time)."""
        attention = layer.encoder_attn
        q = self._heads(attention.q_proj(layer.encoder_attn_layer_norm(x)) * attention.scaling)
        k, v = self._cross_k[i], self._cross_v[i]
        if record is not None and i in record[0]:
            record[1][i] = q[0] @ k[slots[0]].transpose(-1, -2)
        out = torch.cat(
            [
                F.scaled_dot_product_attention(q[b : b + 1], k[s : s + 1], v[s : s + 1], scale=1.0)
                for b, s in enumerate(slots)
            ]
        )
        return attention.out_proj(out.transpose(1, 2).flatten(2))

    def _self_attention(
        self,
        i: int,
        layer: WhisperDecoderLayer,
        x: torch.Tensor,
        index: torch.Tensor,
        positions: torch.Tensor,
        counts: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One layer's self-attention: the feed's keys and values written at their
        positions (padding left out), then each token over its slot's positions."""
        attention = layer.self_attn
        h = layer.self_attn_layer_norm(x)
        q = self._heads(attention.q_proj(h) * attention.scaling)
        k, v = self._heads(attention.k_proj(h)), self._heads(attention.v_proj(h))
        real = torch.arange(x.shape[1], device=x.device)[None, :] < counts[:, None]
        rows, columns = real.nonzero(as_tuple=True)
        self._self_k[i, index[rows], :, positions[rows, columns]] = k[rows, :, columns]
        self._self_v[i, index[rows], :, positions[rows, columns]] = v[rows, :, columns]
        span = mask.shape[-1]
        keys, values = self._self_k[i, index, :, :span], self._self_v[i, index, :, :span]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0)
        return attention.out_proj(out.transpose(1, 2).flatten(2))

    def _self_mask(self, starts: torch.Tensor, counts: torch.Tensor, width: int) -> torch.Tensor:
        """[batch, 1, width, span]: fed token t of slot b sees positions ≤ starts[b] + t."""
        span = int((starts + counts).max())
        seen = starts[:, None] + torch.arange(width, device=starts.device)[None, :]
        keys = torch.arange(span, device=starts.device)
        return (keys[None, None, :] <= seen[:, :, None])[:, None]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, tokens, d_model] → [batch, heads, tokens, head_dim]."""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
