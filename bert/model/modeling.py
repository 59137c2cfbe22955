"""Unpadded BERT for pretraining: every layer runs on packed tokens [T, hidden].

Nothing is ever computed for padding: embeddings and encoder layers see only the T real tokens of
the batch (data/packing.py builds the packing on the host), attention is masked per sequence,
the pooler sees only each sequence's [CLS] token and the MLM head only the masked tokens.
Parameter names follow Google's BERT closely (bert/model/weights.py maps HF and NVIDIA names);
every LayerNorm parameter name contains `layer_norm`, so the optimizer's no-decay rule
(REFERENCE 1: LayerNorm and bias) is a name test.

The fused kernels (model.fused_* flags, kernels/) swap a function, never a parameter: the
parameter names, and so checkpoints, are the same with every flag. The model picks its layer
functions once, at build (bert/model/fused.py's `layer_functions`: the references of
bert/model/layer_functions.py with the replacements of the flags that are on), and hands them
to every module, as it does its attention backend (bert/model/attention.py). The embeddings'
LayerNorm is not fused: their dropout comes after the LayerNorm, not before the residual add the
kernel fuses. The NSP layer stays F.linear under fused_dense: its 2 outputs are not the multiple
of 8 cuBLASLt needs.
`model.compile_sublayers` puts the same two sublayer functions (attention output and FFN, each
ending in dropout + residual + LayerNorm) under torch.compile instead: the compiler's fusion,
measured against the hand-written one (scripts/bench_throughput.py `+sublayers`).
`model.fp8_linear` gives each encoder block two FP8 GEMM functions with their own scaling state
(bert/model/fp8.py: `fp8_first`, `fp8_last`, buffers outside the state dict); the heads keep
theirs.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bert.model import attention, fp8
from bert.model import fused as ops
from bert.model import layer_functions
from bert.model.layer_functions import LayerFunctions, compiled_impl
from bert.model.config import ModelConfig
from data.packing import PackedBatch

# (logits (M, padded_vocab), labels (M,), vocab_size) -> the mean MLM loss
MLMLoss = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig, functions: LayerFunctions):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.padded_vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.lookup_words = functions.word_embedding

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        """-> (T, hidden)"""
        x = (
            self.lookup_words(batch.input_ids, self.word_embeddings)
            + self.position_embeddings(batch.position_ids)
            + self.token_type_embeddings(batch.segment_ids)
        )
        return self.dropout(self.layer_norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention over packed sequences, with output projection and residual."""

    def __init__(
        self, cfg: ModelConfig, functions: LayerFunctions, backend: attention.AttentionBackend
    ):
        """functions, backend: the model's, picked once (BertForPretraining)."""
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        # One fused projection: a single GEMM for Q, K and V.
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.attention_dropout = cfg.attention_probs_dropout_prob
        self.attend, self.attend_subset = backend.attend, backend.attend_subset
        functions = functions.with_own(fp8.encoder_gemms(self, cfg))
        self.linear_with_residual = functions.linear_with_residual
        # forward_subset's Q and K/V halves of the QKV GEMM: with FP8, the QKV GEMM's scales
        # (its bound __call__: a module attribute would register fp8_first twice)
        self.linear = self.fp8_first.__call__ if cfg.fp8_linear else functions.linear
        self.sublayer_output = compiled_impl(functions.sublayer_output, cfg.compile_sublayers)

    def forward(self, x: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """x: (T, hidden) -> (T, hidden)"""
        tokens = x.shape[0]
        # residual: x, or with fused_dense the node that adds its gradient in the QKV GEMM.
        qkv, residual = self.linear_with_residual(x, self.qkv.weight, self.qkv.bias)
        q, k, v = qkv.view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        dropout_p = self.attention_dropout if self.training else 0.0
        context = self.attend(q, k, v, batch, dropout_p)
        return self.sublayer_output(
            context.reshape(tokens, -1), self.out, self.dropout, self.layer_norm, residual
        )

    def forward_subset(self, x: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """Queries and outputs only for batch.query_subset's tokens; keys and values from all.
        x: (T, hidden) -> (Q, hidden), in the subset's order."""
        hidden = x.shape[1]
        x_queries = x.index_select(0, batch.query_subset.index)
        weight, bias = self.qkv.weight, self.qkv.bias  # rows: Q, then K and V
        q = self.linear(x_queries, weight[:hidden], bias[:hidden])
        kv = self.linear(x, weight[hidden:], bias[hidden:])
        q = q.view(q.shape[0], self.num_heads, self.head_dim)
        k, v = kv.view(x.shape[0], 2, self.num_heads, self.head_dim).unbind(1)
        dropout_p = self.attention_dropout if self.training else 0.0
        context = self.attend_subset(q, k, v, batch, dropout_p)
        return self.sublayer_output(
            context.reshape(q.shape[0], -1), self.out, self.dropout, self.layer_norm, x_queries
        )


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig, functions: LayerFunctions):
        super().__init__()
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.approximate = "tanh" if cfg.hidden_act == "gelu_tanh" else "none"
        functions = functions.with_own(fp8.encoder_gemms(self, cfg))
        self.sublayer = compiled_impl(functions.feed_forward, cfg.compile_sublayers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (T, hidden) -> LayerNorm(x + dropout(output(gelu(intermediate(x))))), (T, hidden)"""
        return self.sublayer(
            x, self.intermediate, self.output, self.dropout, self.layer_norm, self.approximate
        )


class EncoderLayer(nn.Module):
    def __init__(
        self, cfg: ModelConfig, functions: LayerFunctions, backend: attention.AttentionBackend
    ):
        super().__init__()
        self.attention = SelfAttention(cfg, functions, backend)
        self.ffn = FeedForward(cfg, functions)

    def forward(self, x: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        return self.ffn(self.attention(x, batch))

    def forward_subset(self, x: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """x: (T, hidden) -> (Q, hidden) for batch.query_subset's tokens only."""
        return self.ffn(self.attention.forward_subset(x, batch))


class PretrainingHeads(nn.Module):
    """MLM head (transform + tied decoder) on masked tokens; NSP head on the pooled [CLS]."""

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding, functions: LayerFunctions):
        super().__init__()
        self.transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.transform_layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.decoder_weight = word_embeddings.weight  # tied, (padded_vocab, hidden)
        self.decoder_bias = nn.Parameter(torch.zeros(cfg.padded_vocab_size))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self.approximate = "tanh" if cfg.hidden_act == "gelu_tanh" else "none"
        self.linear = functions.linear  # decoder and pooler
        self.linear_gelu = functions.linear_gelu

    def mlm_logits(self, masked_hidden: torch.Tensor) -> torch.Tensor:
        """masked_hidden: (M, hidden) -> (M, padded_vocab)"""
        h = self.linear_gelu(
            masked_hidden, self.transform.weight, self.transform.bias, self.approximate
        )
        return self.linear(self.transform_layer_norm(h), self.decoder_weight, self.decoder_bias)

    def nsp_logits(self, cls_hidden: torch.Tensor) -> torch.Tensor:
        """cls_hidden: (B, hidden) -> (B, 2)"""
        pooled = torch.tanh(self.linear(cls_hidden, self.pooler.weight, self.pooler.bias))
        return self.nsp(pooled)


class BertForPretraining(nn.Module):
    def __init__(self, cfg: ModelConfig, device: torch.device | str | None = None):
        """device: where the model will run, if known. On CUDA, a fused kernel the config asks
        for that cannot be loaded fails here, with the build hint, not at the first step. The
        model is still built on the CPU; move it with .to(device)."""
        super().__init__()
        if device is not None:
            ops.require_fused_kernels(cfg, device)
            fp8.require_device(cfg, device)
        self.config = cfg
        functions = ops.layer_functions(cfg)  # once for the whole model
        self.mlm_cross_entropy = functions.mlm_cross_entropy
        self.attention_backend = attention.resolve(cfg.attention)  # what its batches carry
        self.embeddings = Embeddings(cfg, functions)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg, functions, self.attention_backend)
            for _ in range(cfg.num_hidden_layers)
        )
        self.heads = PretrainingHeads(cfg, self.embeddings.word_embeddings, functions)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """BERT initialization: N(0, initializer_range) weights, zero biases, unit LayerNorm."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def loss(
        self, mlm_logits: torch.Tensor, nsp_logits: torch.Tensor, batch: PackedBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(MLM loss, NSP loss) of this model's outputs, with its own loss path
        (model.fused_mlm_loss) and vocabulary: the model owns its loss."""
        return pretraining_loss(
            mlm_logits,
            nsp_logits,
            batch,
            self.config.vocab_size,
            self.mlm_cross_entropy,
        )

    def count_correct(self, mlm_logits: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """Masked tokens predicted correctly (0-dim int64 on the device: no host read)."""
        return mlm_correct(mlm_logits, batch, self.config.vocab_size)

    def pack_options(self) -> dict[str, bool]:
        """What the host must build into each PackedBatch for this model (data.packing's
        pack_samples keywords): only the metadata the model reads."""
        return {
            "attention_groups": self.attention_backend.attention_groups,
            "query_subset": self.config.last_layer_subset,
        }

    def forward(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns MLM logits (M, padded_vocab) for the masked tokens and NSP logits (B, 2)."""
        x = self.embeddings(batch)
        subset = self.config.last_layer_subset
        for layer in self.layers[:-1] if subset else self.layers:
            x = layer(x, batch)
        if subset:  # rows: per sequence its [CLS], then its masked tokens
            if batch.query_subset is None:
                raise ValueError(
                    "model.last_layer_subset needs PackedBatch.query_subset: pack "
                    "the batch with pack_samples(..., **model.pack_options())"
                )
            x = self.layers[-1].forward_subset(x, batch)
            masked_hidden = x.index_select(0, batch.query_subset.masked_rows)
            cls_hidden = x.index_select(0, batch.query_subset.cu_seqlens[:-1])
        else:
            masked_hidden = x.index_select(0, batch.masked_positions)
            cls_hidden = x.index_select(0, batch.cu_seqlens[:-1])
        return self.heads.mlm_logits(masked_hidden), self.heads.nsp_logits(cls_hidden)


def pretraining_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    batch: PackedBatch,
    vocab_size: int,
    mlm_cross_entropy: MLMLoss = layer_functions.mlm_cross_entropy,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(MLM loss, NSP loss), each a mean: MLM over masked tokens, NSP over sequences.

    Logits of the vocabulary padding rows are dropped so they never enter the softmax.
    mlm_cross_entropy: the MLM loss function; a model's own is `model.loss` (with
    model.fused_mlm_loss, the softmax cross-entropy kernel).
    """
    mlm = mlm_cross_entropy(mlm_logits, batch.masked_labels, vocab_size)
    nsp = F.cross_entropy(nsp_logits.float(), batch.nsp_labels)
    return mlm, nsp


def mlm_correct(mlm_logits: torch.Tensor, batch: PackedBatch, vocab_size: int) -> torch.Tensor:
    """Number of masked tokens predicted correctly, as a 0-dim int64 tensor (no host sync)."""
    predictions = mlm_logits[:, :vocab_size].argmax(dim=-1)
    return (predictions == batch.masked_labels).sum()


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
