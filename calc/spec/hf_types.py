"""The types of the Hugging Face config keys calc.spec.hf reads, checked before any is used."""

from __future__ import annotations

from calc.core import limits
from calc.core.errors import SpecError

# The types of the keys the mappings read, checked strictly before any is used: an int key takes
# 42, not 42.0 or "42" (the published configs write whole numbers), a flag takes true/false.
# A null value counts as absent. Layer counts are bounded here because the mappings loop over them.
_LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "max_window_layers", "first_k_dense_replace",
                         "num_nextn_predict_layers", "moe_layer_freq", "sliding_window_pattern",
                         "_sliding_window_pattern", "decoder_sparse_step"})
_ZERO_OK = frozenset({"max_window_layers", "first_k_dense_replace", "num_nextn_predict_layers",
                      "n_shared_experts"})
_INT_KEYS = _LAYER_KEYS | _ZERO_OK | frozenset({
    "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings", "head_dim", "sliding_window", "num_local_experts", "num_experts_per_tok",
    "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", "n_routed_experts",
    "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_embd", "n_head",
    "n_positions", "n_inner"})
_BOOL_KEYS = frozenset({"tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias", "use_sliding_window"})
_STR_KEYS = frozenset({"hidden_act", "hidden_activation", "activation_function", "topk_method", "torch_dtype",
                       "dtype"})


def check_types(data: dict, path: str, prefix: str) -> None:
    """One SpecError for the first key of the wrong type or out of range (file, key, problem)."""
    for key, value in data.items():
        if value is None:
            continue
        where = prefix + key
        if key in _INT_KEYS:
            if type(value) is not int:
                raise SpecError(path, where, f"expected a whole number, got {value!r:.40}")
            low = 0 if key in _ZERO_OK else 1
            high = limits.MAX_LAYERS if key in _LAYER_KEYS else limits.MAX_CONTEXT
            problem = limits.bad_number(value, high, low)
            if problem:
                raise SpecError(path, where, problem)
        elif key in _BOOL_KEYS and type(value) is not bool:
            raise SpecError(path, where, f"expected true or false, got {value!r:.40}")
        elif key in _STR_KEYS and not isinstance(value, str):
            raise SpecError(path, where, f"expected a string, got {value!r:.40}")
        elif key == "layer_types" and not (isinstance(value, list) and all(isinstance(t, str) for t in value)):
            raise SpecError(path, where, "expected a list of strings, one per layer")
        elif key == "mlp_only_layers" and not (isinstance(value, list)
                                               and all(type(i) is int and i >= 0 for i in value)):
            raise SpecError(path, where, "expected a list of layer indices (whole numbers >= 0)")
