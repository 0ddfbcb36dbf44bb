"""Hugging Face ``config.json`` -> ModelSpec, one small mapping per architecture family.

The family comes from the config's ``architectures`` list through an explicit
table (``ARCHITECTURES``); nothing is inferred from ratios or from substrings of a
name. A key the family needs and the file lacks is an error naming every such
key at once. Where the published configs rely on a transformers class default
(Gemma 3's sparse ``text_config``, GPT-2's ``n_inner``, ``num_key_value_heads``
for the Llama-style classes that fall back to the query heads) the default is
applied here, as transformers applies it, and cited next to it.

Field notes (transformers' modeling code):
- Qwen2 puts a bias on q/k/v (not o) with no config key for it; Qwen3 adds q/k RMSNorms.
- Gemma 2 and 3 have four RMSNorms per layer; Gemma 2 slides on even layers
  (``is_sliding = not bool(layer_idx % 2)``); Gemma 3 on every layer but each
  ``sliding_window_pattern``-th; an explicit ``layer_types`` list wins for both.
- Qwen2/Qwen3 slide only with ``use_sliding_window``, and then on layers >= ``max_window_layers``.
- DeepSeek-V3's router carries ``e_score_correction_bias`` (``topk_method: noaux_tc``);
  its multi-token-prediction module (``num_nextn_predict_layers``) is not part of the
  main model and is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from calc.core.errors import SpecError
from calc.core.units import canonical_dtype
from calc.spec.hf_types import check_types
from calc.spec.model import ModelSpec

_DECODER = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
            "max_position_embeddings")
_MLA = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_DEEPSEEK_MOE = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts")

# transformers' Gemma3TextConfig defaults; the published Gemma 3 configs name only what differs.
_GEMMA3_TEXT_DEFAULTS = {
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
    "max_position_embeddings": 131072, "sliding_window": 4096, "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh",
}


class _Cfg:
    """One config mapping, the file it came from, and the notes the spec's description will carry."""

    def __init__(self, data: dict, path: str, arch: str, prefix: str = ""):
        check_types(data, path, prefix)
        self.data, self.path, self.arch, self.prefix = data, path, arch, prefix
        self.notes: list[str] = []

    def __getitem__(self, key: str):
        return self.data[key]

    def get(self, key: str, default=None):
        value = self.data.get(key)
        return default if value is None else value

    def need(self, *keys: str) -> None:
        """Raise one SpecError naming every key that is absent or null."""
        missing = [self.prefix + k for k in keys if self.data.get(k) is None]
        if missing:
            raise SpecError(self.path, ", ".join(missing), f"missing (needed for {self.arch})")


# --------------------------------------------------------------------------- shared pieces


def _base(c: _Cfg, *, tie: bool, norm: str = "rmsnorm", norms_per_layer: int = 2,
          position: str = "rope", context_key: str = "max_position_embeddings",
          layers_key: str = "num_hidden_layers", hidden_key: str = "hidden_size") -> dict:
    return {
        "num_layers": c[layers_key],
        "hidden_size": c[hidden_key],
        "vocab_size": c["vocab_size"],
        "max_context": c[context_key],
        "tie_embeddings": bool(c.get("tie_word_embeddings", tie)),
        "norm": norm,
        "norms_per_layer": norms_per_layer,
        "position_embedding": position,
    }


def _attention(c: _Cfg, *, kv_defaults_to_heads: bool = False, **flags) -> dict:
    """Standard attention; head_dim from the config when given, else ModelSpec derives H / Hq."""
    heads = c["num_attention_heads"]
    if not kv_defaults_to_heads:
        c.need("num_key_value_heads")
    return {"num_heads": heads, "num_kv_heads": c.get("num_key_value_heads", heads),
            "head_dim": c.get("head_dim"), **flags}


def _gated_mlp(c: _Cfg, activation: str, intermediate: int | None = None) -> dict:
    return {"kind": "gated", "intermediate_size": intermediate or c["intermediate_size"],
            "bias": bool(c.get("mlp_bias", False)), "activation": activation}


def _pattern(flags: list[bool]) -> tuple[bool, ...]:
    """The shortest prefix p with flags[i] == p[i % len(p)] for every layer."""
    for n in range(1, len(flags) + 1):
        if all(flags[i] == flags[i % n] for i in range(len(flags))):
            return tuple(flags[:n])
    return tuple(flags)


def _window(window: int | None, flags: list[bool] | None = None) -> dict:
    """sliding_window / sliding_pattern keys; all layers slide when ``flags`` is None."""
    if not window or (flags is not None and not any(flags)):
        return {}
    out = {"sliding_window": window}
    if flags is not None and not all(flags):
        out["sliding_pattern"] = _pattern(flags)
    return out


def _layer_types(c: _Cfg, layers_key: str = "num_hidden_layers") -> list[bool] | None:
    types = c.get("layer_types")
    if types is None:
        return None
    if len(types) != c[layers_key]:
        raise SpecError(c.path, c.prefix + "layer_types",
                        f"has {len(types)} entries for {c[layers_key]} layers ({layers_key})")
    return [t == "sliding_attention" for t in types]


def _qwen_window(c: _Cfg) -> dict:
    """Qwen2/Qwen3: sliding only with use_sliding_window, on layers >= max_window_layers."""
    flags = _layer_types(c)
    if flags is None and c.get("use_sliding_window", False) and c.get("sliding_window"):
        c.need("max_window_layers")
        flags = [i >= c["max_window_layers"] for i in range(c["num_hidden_layers"])]
    return _window(c.get("sliding_window"), flags) if flags is not None else {}


def _moe(c: _Cfg, *, experts: str, intermediate: str, **extra) -> dict:
    return {"num_experts": c[experts], "experts_per_token": c["num_experts_per_tok"],
            "expert_intermediate_size": c[intermediate], **extra}


def _qwen_moe_layout(c: _Cfg) -> dict:
    """Qwen MoE layer i is sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0;
    MoESpec describes that when the step is 1 and the dense layers are a leading run."""
    step, dense = c.get("decoder_sparse_step", 1), sorted(c.get("mlp_only_layers", []))
    if step != 1:
        raise SpecError(c.path, c.prefix + "decoder_sparse_step", f"{step} is not supported (only 1)")
    if dense != list(range(len(dense))):
        raise SpecError(c.path, c.prefix + "mlp_only_layers", "only a leading run of dense layers is supported")
    return {"first_dense_layers": len(dense)}


# --------------------------------------------------------------------------- families


def _llama(c: _Cfg) -> dict:
    c.need(*_DECODER)
    bias = bool(c.get("attention_bias", False))
    return {**_base(c, tie=False),
            "attention": _attention(c, kv_defaults_to_heads=True, qkv_bias=bias, o_bias=bias),
            "mlp": _gated_mlp(c, c.get("hidden_act", "silu"))}


def _mistral(c: _Cfg) -> dict:
    c.need(*_DECODER)
    return {**_base(c, tie=False), "attention": {**_attention(c), **_window(c.get("sliding_window"))},
            "mlp": _gated_mlp(c, c.get("hidden_act", "silu"))}


def _mixtral(c: _Cfg) -> dict:
    c.need(*_DECODER, "num_local_experts", "num_experts_per_tok")
    return {**_mistral(c), "moe": _moe(c, experts="num_local_experts", intermediate="intermediate_size")}


def _qwen2(c: _Cfg) -> dict:
    c.need(*_DECODER)
    att = _attention(c, kv_defaults_to_heads=True, qkv_bias=bool(c.get("qkv_bias", True)))
    return {**_base(c, tie=False), "attention": {**att, **_qwen_window(c)},
            "mlp": _gated_mlp(c, c.get("hidden_act", "silu"))}


def _qwen3(c: _Cfg) -> dict:
    c.need(*_DECODER)
    bias = bool(c.get("attention_bias", False))
    att = _attention(c, kv_defaults_to_heads=True, qkv_bias=bias, o_bias=bias, qk_norm=True)
    return {**_base(c, tie=False), "attention": {**att, **_qwen_window(c)},
            "mlp": _gated_mlp(c, c.get("hidden_act", "silu"))}


def _qwen2_moe(c: _Cfg) -> dict:
    c.need(*_DECODER, "num_experts", "num_experts_per_tok", "moe_intermediate_size",
           "shared_expert_intermediate_size")
    moe = _moe(c, experts="num_experts", intermediate="moe_intermediate_size", num_shared_experts=1,
               shared_expert_intermediate_size=c["shared_expert_intermediate_size"], shared_expert_gate=True)
    return {**_qwen2(c), "moe": {**moe, **_qwen_moe_layout(c)}}


def _qwen3_moe(c: _Cfg) -> dict:
    c.need(*_DECODER, "num_experts", "num_experts_per_tok", "moe_intermediate_size")
    moe = _moe(c, experts="num_experts", intermediate="moe_intermediate_size")
    return {**_qwen3(c), "moe": {**moe, **_qwen_moe_layout(c)}}


def _phi3(c: _Cfg) -> dict:
    c.need(*_DECODER)
    bias = bool(c.get("attention_bias", False))
    att = _attention(c, kv_defaults_to_heads=True, qkv_bias=bias, o_bias=bias, fused_qkv=True)
    return {**_base(c, tie=False), "attention": {**att, **_window(c.get("sliding_window"))},
            "mlp": _gated_mlp(c, c.get("hidden_act", "silu"))}


def _gemma_activation(c: _Cfg) -> str:
    return c.get("hidden_activation") or c.get("hidden_act", "gelu_pytorch_tanh")


def _gemma(c: _Cfg) -> dict:
    c.need(*_DECODER)
    bias = bool(c.get("attention_bias", False))
    return {**_base(c, tie=True), "attention": _attention(c, qkv_bias=bias, o_bias=bias),
            "mlp": _gated_mlp(c, _gemma_activation(c))}


def _gemma2(c: _Cfg) -> dict:
    c.need(*_DECODER, "sliding_window")
    flags = _layer_types(c) or [i % 2 == 0 for i in range(c["num_hidden_layers"])]
    bias = bool(c.get("attention_bias", False))
    att = {**_attention(c, qkv_bias=bias, o_bias=bias), **_window(c["sliding_window"], flags)}
    return {**_base(c, tie=True, norms_per_layer=4), "attention": att, "mlp": _gated_mlp(c, _gemma_activation(c))}


def _gemma3(c: _Cfg) -> dict:
    c.need("hidden_size", "intermediate_size", "num_hidden_layers")
    absent = [k for k in _GEMMA3_TEXT_DEFAULTS if c.data.get(k) is None]
    c.data = {**_GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in c.data.items() if v is not None}}
    if absent:
        c.notes.append(f"transformers' Gemma3TextConfig defaults used for {', '.join(absent)}")
    every = c.get("sliding_window_pattern") or c.get("_sliding_window_pattern", 6)
    flags = _layer_types(c) or [(i + 1) % every != 0 for i in range(c["num_hidden_layers"])]
    bias = bool(c.get("attention_bias", False))
    att = {**_attention(c, qkv_bias=bias, o_bias=bias, qk_norm=True), **_window(c["sliding_window"], flags)}
    return {**_base(c, tie=True, norms_per_layer=4), "attention": att, "mlp": _gated_mlp(c, _gemma_activation(c))}


def _deepseek(c: _Cfg) -> dict:
    c.need(*_DECODER, *_MLA, *_DEEPSEEK_MOE)
    if c.get("num_nextn_predict_layers"):
        c.notes.append(f"the {c['num_nextn_predict_layers']} multi-token-prediction layer(s) are left out")
    att = {"kind": "mla", "num_heads": c["num_attention_heads"], "q_lora_rank": c.get("q_lora_rank"),
           **{k: c[k] for k in _MLA}}
    moe = _moe(c, experts="n_routed_experts", intermediate="moe_intermediate_size",
               num_shared_experts=c["n_shared_experts"], first_dense_layers=c.get("first_k_dense_replace", 0),
               layer_frequency=c.get("moe_layer_freq", 1), router_bias=c.get("topk_method") == "noaux_tc")
    return {**_base(c, tie=False), "attention": att, "mlp": _gated_mlp(c, c.get("hidden_act", "silu")), "moe": moe}


def _gpt_oss(c: _Cfg) -> dict:
    """gpt-oss: every MLP is biased SwiGLU experts behind a biased router, attention with biases and
    one sink logit per query head, layers alternating a sliding window (even layers, transformers'
    GptOssConfig default) with full attention."""
    c.need(*_DECODER, "num_key_value_heads", "num_local_experts", "num_experts_per_tok", "sliding_window")
    flags = _layer_types(c) or [i % 2 == 0 for i in range(c["num_hidden_layers"])]
    bias = bool(c.get("attention_bias", True))
    att = {**_attention(c, qkv_bias=bias, o_bias=bias, sinks=True), **_window(c["sliding_window"], flags)}
    moe = _moe(c, experts="num_local_experts", intermediate="intermediate_size", num_shared_experts=0,
               router_bias=True)
    return {**_base(c, tie=False), "attention": att,
            "mlp": {**_gated_mlp(c, c.get("hidden_act", "silu")), "bias": True}, "moe": moe}


def _gpt2(c: _Cfg) -> dict:
    c.need("n_embd", "n_layer", "n_head", "n_positions", "vocab_size")
    H = c["n_embd"]
    return {**_base(c, tie=True, norm="layernorm", position="learned", context_key="n_positions",
                     layers_key="n_layer", hidden_key="n_embd"),
            "attention": {"num_heads": c["n_head"], "num_kv_heads": c["n_head"], "qkv_bias": True,
                          "o_bias": True, "fused_qkv": True},
            # GPT2MLP: inner_dim = n_inner if set else 4 * n_embd
            "mlp": {"kind": "plain", "intermediate_size": c.get("n_inner", 4 * H), "bias": True,
                    "activation": c.get("activation_function", "gelu_new")}}


def _gpt_neox(c: _Cfg) -> dict:
    c.need(*_DECODER)
    bias = bool(c.get("attention_bias", True))
    return {**_base(c, tie=False, norm="layernorm"),
            "attention": _attention(c, kv_defaults_to_heads=True, qkv_bias=bias, o_bias=bias, fused_qkv=True),
            "mlp": {"kind": "plain", "intermediate_size": c["intermediate_size"], "bias": True,
                    "activation": c.get("hidden_act", "gelu")}}


ARCHITECTURES: dict[str, Callable[[_Cfg], dict]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "MixtralForCausalLM": _mixtral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3,
    "Qwen2MoeForCausalLM": _qwen2_moe,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "Phi3ForCausalLM": _phi3,
    "GemmaForCausalLM": _gemma,
    "Gemma2ForCausalLM": _gemma2,
    "Gemma3ForCausalLM": _gemma3,
    "Gemma3ForConditionalGeneration": _gemma3,  # the text model in text_config
    "DeepseekV2ForCausalLM": _deepseek,
    "DeepseekV3ForCausalLM": _deepseek,
    "GptOssForCausalLM": _gpt_oss,
    "GPT2LMHeadModel": _gpt2,
    "GPTNeoXForCausalLM": _gpt_neox,
}
_TEXT_CONFIG = frozenset({"Gemma3ForConditionalGeneration"})


def _architecture(config: dict, path: str) -> str:
    archs = config.get("architectures")
    if not archs:
        raise SpecError(path, "architectures", "missing (needed to choose the field mapping)")
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise SpecError(path, "architectures", f"expected a list of class names, got {archs!r:.60}")
    for arch in archs:
        if arch in ARCHITECTURES:
            return arch
    raise SpecError(path, "architectures",
                    f"unknown architecture {', '.join(map(str, archs))} (supported: {', '.join(ARCHITECTURES)})")


def _dtype(c: _Cfg, top: dict) -> str:
    for source in (c.data, top):
        for key in ("torch_dtype", "dtype"):
            if source.get(key) is not None:
                try:
                    return canonical_dtype(source[key])
                except ValueError as exc:
                    raise SpecError(c.path, key, str(exc)) from None
    c.notes.append("config.json names no dtype; bfloat16 assumed")
    return "bf16"


def spec_from_hf_config(config: dict, path: str, name: str | None = None) -> ModelSpec:
    """Map a Hugging Face config.json (already parsed) to a ModelSpec.

    ``path`` is the file, for error messages and the spec's ``sources``; ``name``
    defaults to the folder holding it. Raises SpecError naming the file and key.
    """
    arch = _architecture(config, path)
    check_types(config, path, "")
    text = config.get("text_config") if arch in _TEXT_CONFIG else None
    if arch in _TEXT_CONFIG and not isinstance(text, dict):
        raise SpecError(path, "text_config", f"missing (needed for {arch})")
    c = _Cfg(dict(text if text is not None else config), path, arch, "text_config." if text is not None else "")
    fields = ARCHITECTURES[arch](c)
    dtype = _dtype(c, config)
    weight_dtype, quantized = None, None
    if isinstance(config.get("quantization_config"), dict):
        q = config["quantization_config"]
        method = q.get("quant_method", "?")
        if method == "fp8":  # e4m3 linear weights (DeepSeek-V3/R1): the default weight dtype
            weight_dtype = "fp8"
            c.notes.append("weights ship fp8 (quantization_config), the default weight dtype")
        elif method == "mxfp4" and "moe" in fields:  # gpt-oss: the experts in MXFP4, the rest as dtype
            weight_dtype = "mxfp4"
            kept = q.get("modules_to_not_convert") or []
            quantized = "experts" if any(str(m).endswith("self_attn") for m in kept) else "linear"
            c.notes.append(f"the {'experts' if quantized == 'experts' else 'linear layers'} ship MXFP4 "
                           "(quantization_config), the default weight dtype")
        else:
            c.notes.append(f"weights ship quantized ({method}, see quantization_config)")
    note = "; ".join(c.notes)
    data = {
        "name": name or Path(path).parent.name or arch,
        "description": f"Imported from Hugging Face config.json ({arch})" + (f"; {note}" if note else ""),
        "architecture": arch,
        "sources": {"cfg": str(path)},
        "dtype": dtype,
        **({"weight_dtype": weight_dtype} if weight_dtype else {}),
        **({"quantized": quantized} if quantized else {}),
        **fields,
    }
    try:
        return ModelSpec(**data)
    except ValidationError as exc:
        raise SpecError.from_validation(path, exc, ModelSpec) from None
