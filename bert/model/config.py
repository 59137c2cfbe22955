"""The model's own config: BERT's architecture (a Google `bert_config.json`'s fields) and the
model-side switches: the attention backend and the fused kernels.

`model.attention` names a backend of bert/model/attention.py and each `model.fused_*` flag an
entry of bert/model/fused.py's table, whose shape limits are checked here, on the CPU too (the
kernels' twins run the same checks), so a config tested on a CPU also runs on a GPU.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from bert.core.errors import ConfigError, check
from bert.core.readers import read_json
from bert.core.settings import ExpandedPath, F, RegistryName, rebuild, section
from bert.model.attention_backends import BACKENDS
from bert.model.fused import FUSED_OPS, enabled
from bert.model.fused import HIDDEN as FUSED_HIDDEN_SIZE  # noqa: F401 - the kernels' size

# No torch at import (the config is read by commands that answer at once: --help-config, the
# planner): what needs the layer functions' signatures or fp8.py is imported where a switch
# that needs it is on (compile_sublayers, fp8_linear), for a run that imports torch anyway.


def sublayer_fusions() -> list[str]:
    """The fused flags that replace a part of the sublayers model.compile_sublayers compiles
    instead (read from the records)."""
    from bert.model.layer_functions import COMPILED, depends_on

    compiled = depends_on(COMPILED)
    return [flag for flag, op in FUSED_OPS.items() if compiled & set(op.replaces)]


def fp8_competitors() -> list[str]:
    """The fused flags that replace an encoder GEMM model.fp8_linear replaces, or a layer
    function built from one (fused_dense_gelu's feed_forward): read from the records."""
    from bert.model import fp8
    from bert.model.layer_functions import depends_on

    return [
        flag
        for flag, op in FUSED_OPS.items()
        if any(depends_on([name]) & set(fp8.REPLACES) for name in op.replaces)
    ]


# model.attention: a name of the backends' table, read when a config is validated
AttentionName = RegistryName(lambda: BACKENDS)

# the GPU window record that timed model.compile_sublayers and found it correct; None: not yet
COMPILE_SUBLAYERS_GPU_VALIDATED: str | None = None


def declare_fused_flags(cls: type) -> None:
    """Declares `model.<flag>: bool = false` for every fused op of bert/model/fused.py's
    FUSED_OPS not declared yet (with its record's description), before compile_sublayers, and
    rebuilds the section's validation. Each flag replaces a plain-PyTorch path; on CUDA it needs
    the compiled extension (checked when the model is built) and fp16/bf16 activations
    (run.precision); on the CPU its PyTorch twin runs. The section runs this whenever it is
    used (bert/core/settings.py: `fields_of`, each build), so a record registered at any time
    is a key like the others."""
    missing = [flag for flag in FUSED_OPS if flag not in cls.__dataclass_fields__]
    if not missing:
        return
    # proper dataclass fields for the flags, from a throwaway dataclass
    made = dataclasses.make_dataclass(
        "FusedFlags",
        [
            (flag, "bool", dataclasses.field(default=F(False, FUSED_OPS[flag].doc)))
            for flag in missing
        ],
    ).__dataclass_fields__
    annotations, fields = {}, {}
    for name, field in cls.__dataclass_fields__.items():
        if name == "compile_sublayers":
            annotations.update(dict.fromkeys(missing, "bool"))
            fields.update({flag: made[flag] for flag in missing})
        annotations[name], fields[name] = cls.__annotations__[name], field
    for flag in missing:
        setattr(cls, flag, made[flag].default)
    cls.__annotations__, cls.__dataclass_fields__ = annotations, fields
    rebuild(cls)


@section("model")
class ModelConfig:
    """BERT architecture (the fields of a Google `bert_config.json`) and model-side switches."""

    vocab_size: int = F(
        30522, "real vocabulary; the embedding is padded to a multiple of 8", gt=0, le=32768
    )  # ids are int16 in the data (REFERENCE 2)
    # upper bounds: far above any BERT, low enough that a typo fails here, not in an allocation
    hidden_size: int = F(1024, "width of every layer (BERT-Large: 1024)", gt=0, le=65536)
    num_hidden_layers: int = F(24, "encoder layers", gt=0, le=1024)
    num_attention_heads: int = F(
        16, "attention heads per layer; must divide hidden_size", gt=0, le=4096
    )
    intermediate_size: int = F(4096, "inner width of each feed-forward block", gt=0, le=262144)
    hidden_act: Literal["gelu", "gelu_tanh"] = F("gelu", "gelu (erf) or gelu_tanh")
    hidden_dropout_prob: float = F(
        0.1, "dropout after the embeddings and every sublayer", ge=0, lt=1
    )
    attention_probs_dropout_prob: float = F(
        0.1, "dropout on the attention probabilities", ge=0, lt=1
    )
    max_position_embeddings: int = F(
        512, "learned positions; at least data.max_seq_length", gt=0, le=32768
    )
    type_vocab_size: int = F(
        2,
        "segment embeddings (sentence A and B: the data's segment ids are 0 and 1)",
        ge=2,
        le=1024,
    )
    initializer_range: float = F(
        0.02, "std of the truncated-normal weight init", gt=0, le=1e30
    )  # within float32
    layer_norm_eps: float = F(1e-12, "LayerNorm epsilon", gt=0, le=1e30)
    pad_vocab_to_multiple_of: int = F(8, "embedding rows rounded up (GEMM-friendly)", gt=0, le=1024)
    attention: AttentionName = F(
        "padded_sdpa",
        "attention backend, resolved when the model is built (what each does: "
        "bert/model/attention_backends.py). GPU status: the backend's record "
        "(bert/gpu_status.py).",
    )
    last_layer_subset: bool = F(
        False,
        "The last encoder layer computes queries, the attention "
        "output and the FFN only for the tokens the heads read ([CLS] "
        "and the masked tokens); keys and values still come from all "
        "tokens, so the heads' inputs are unchanged. About 3% fewer "
        "encoder FLOPs for BERT-Large on the MLPerf mix (HazyResearch's "
        "MLPerf BERT does this; NVIDIA's does not).",
    )
    compile_sublayers: bool = F(
        False,
        "torch.compile (dynamic shapes) of the attention-output "
        "and FFN sublayers, the compiler's answer to the fused kernels "
        "above, with which it does not combine (each is measured "
        "against the other). Attention itself stays eager: its backends "
        "read per-batch lengths. GPU status: "
        "COMPILE_SUBLAYERS_GPU_VALIDATED.",
    )
    fp8_linear: bool = F(
        False,
        "The encoder's QKV, attention-output and both FFN GEMMs in FP8 (torch._scaled_mm: "
        "e4m3 activations and weights, e5m2 output gradients, per-tensor scales; the "
        "embeddings and heads unchanged; docs/fp8.md). CUDA needs compute capability 8.9+ "
        "and run.precision=bf16 or fp16; hidden and intermediate sizes multiples of 16. Not "
        "with fused_dense, fused_dense_gelu (same GEMMs) or compile_sublayers. GPU status: "
        "FP8_LINEAR_GPU_VALIDATED (bert/model/fp8.py).",
    )
    fp8_scaling: Literal["delayed", "current"] = F(
        "delayed",
        "model.fp8_linear's scales: delayed (from an amax history of the last 16 calls per "
        "tensor, kept on the device) or current (from the tensor being cast)",
    )
    bert_config_file: ExpandedPath = F(
        "", "optional bert_config.json; its values replace the fields above"
    )

    @classmethod
    def declare_fields(cls) -> None:
        declare_fused_flags(cls)

    # Equality, hash and repr over the fields the section has now (the generated ones would
    # know only those declared with the class, not the fused flags declared later).
    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__dataclass_fields__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__)
        return f"ModelConfig({shown})"

    @staticmethod
    def prepare(values: dict) -> dict:
        """A bert_config.json's values replace the given ones (before validation)."""
        path = values.get("bert_config_file")
        if not path:
            return values
        path = os.path.expanduser(str(path))
        loaded = read_json(path, "model.bert_config_file", ConfigError)
        known = {f.name for f in dataclasses.fields(ModelConfig)} - {"bert_config_file"}
        return {**values, **{k: v for k, v in loaded.items() if k in known}}

    def __post_init__(self) -> None:
        check(
            self.hidden_size % self.num_attention_heads == 0,
            f"model.hidden_size={self.hidden_size} is not divisible by "
            f"model.num_attention_heads={self.num_attention_heads}",
        )
        replaced: dict[str, str] = {}
        for flag in enabled(self):
            problem = FUSED_OPS[flag].check(self)
            check(problem is None, f"model.{flag}=true needs {problem}")
            for name in FUSED_OPS[flag].replaces:
                check(
                    name not in replaced,
                    f"model.{flag}=true and model.{replaced.get(name)}=true both replace the "
                    f"layer function {name!r}: switch one off",
                )
                replaced[name] = flag
        if self.fp8_linear:
            self._check_fp8()
        if self.compile_sublayers:
            fused = [f"model.{flag}" for flag in sublayer_fusions() if getattr(self, flag)]
            check(
                not fused,
                f"model.compile_sublayers=true compiles the sublayers that "
                f"{', '.join(fused)} replace{'s' if len(fused) == 1 else ''}: "
                f"switch one or the other off",
            )

    def _check_fp8(self) -> None:
        from bert.model import fp8

        problem = fp8.config_problem(self)
        check(problem is None, f"model.fp8_linear=true needs {problem}")
        same_gemms = [f"model.{flag}" for flag in fp8_competitors() if getattr(self, flag)]
        check(
            not same_gemms,
            f"model.fp8_linear=true and {', '.join(same_gemms)}=true replace the same "
            f"encoder GEMMs: switch one off",
        )
        check(
            not self.compile_sublayers,
            "model.fp8_linear=true with model.compile_sublayers=true is not supported yet "
            "(the FP8 GEMMs update their scaling state in place): switch one off",
        )

    @property
    def padded_vocab_size(self) -> int:
        m = self.pad_vocab_to_multiple_of
        return (self.vocab_size + m - 1) // m * m

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads
