"""calc.spec.hf: published config.json files import to the same model as the catalog YAML."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from calc.core.errors import SpecError
from calc.spec.hf import ARCHITECTURES, spec_from_hf_config
from calc.spec.model import ModelSpec

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
NAMES = sorted(p.parent.name for p in FIXTURES.glob("*/config.json"))


def config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def from_hf(name: str, cfg: dict | None = None) -> ModelSpec:
    path = FIXTURES / name / "config.json"
    return spec_from_hf_config(config(name) if cfg is None else cfg, str(path))


def from_yaml(name: str) -> ModelSpec:
    return ModelSpec(**yaml.safe_load((ROOT / "model_configs" / f"{name}.yaml").read_text()))


def test_fixtures_present():
    required = {"llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "phi-3-mini",
                "mistral-7b", "gpt2", "qwen3-30b-a3b"}
    assert required <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_config_json_matches_catalog_yaml(name):
    hf, cat = from_hf(name), from_yaml(name)
    assert hf.name == name  # the folder holding config.json
    assert hf.params_total == cat.params_total
    assert hf.params_active == cat.params_active
    assert hf.kv_bytes_per_token() == cat.kv_bytes_per_token()
    # sliding windows and their layer pattern agree too
    assert hf.kv_cache_bytes(cat.max_context) == cat.kv_cache_bytes(cat.max_context)
    assert hf.attention.head_dim == cat.attention.head_dim
    assert hf.architecture == config(name)["architectures"][0]
    assert hf.default_weight_dtype == cat.default_weight_dtype  # deepseek-v3: fp8 in both


def test_fp8_quantization_config_is_the_default_weight_dtype():
    cfg = config("deepseek-v3")
    assert cfg["quantization_config"]["quant_method"] == "fp8"
    assert from_hf("deepseek-v3").default_weight_dtype == "fp8"
    plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
    assert from_hf("deepseek-v3", plain).default_weight_dtype == "bf16"  # torch_dtype


def test_head_dim_from_config_when_given_derived_when_absent():
    assert from_hf("qwen3-30b-a3b").attention.head_dim == 128  # given; 2048 / 32 would be 64
    assert from_hf("gemma-2-9b").attention.head_dim == 256  # given; 3584 / 16 would be 224
    assert from_hf("llama-3.1-8b").attention.head_dim == 4096 // 32  # absent: derived
    assert from_hf("phi-3-mini").attention.head_dim == 3072 // 32


def test_name_default_and_override():
    cfg = config("mistral-7b")
    assert spec_from_hf_config(cfg, "/models/my-mistral/config.json").name == "my-mistral"
    assert spec_from_hf_config(cfg, "/models/my-mistral/config.json", name="other").name == "other"


def test_unknown_architecture_names_field_and_supported_list():
    cfg = {**config("llama-3.1-8b"), "architectures": ["FancyNewForCausalLM"]}
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "architectures"
    assert "unknown architecture FancyNewForCausalLM" in str(err.value)
    assert "LlamaForCausalLM" in str(err.value) and "DeepseekV3ForCausalLM" in str(err.value)


def test_missing_architectures():
    cfg = config("llama-3.1-8b")
    del cfg["architectures"]
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "architectures"


def test_missing_fields_all_named_in_one_line():
    cfg = config("llama-3.1-8b")
    del cfg["hidden_size"], cfg["vocab_size"]
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "hidden_size, vocab_size"
    assert err.value.problem == "missing (needed for LlamaForCausalLM)"
    assert "\n" not in str(err.value) and str(err.value).startswith("x/config.json")


def test_missing_field_inside_text_config():
    cfg = config("gemma-3-12b")
    del cfg["text_config"]["hidden_size"]
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "text_config.hidden_size"


def test_missing_moe_field_names_it():
    cfg = config("deepseek-v3")
    del cfg["n_routed_experts"]
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "n_routed_experts"


def test_dtype_missing_is_assumed_and_said():
    spec = from_hf("gpt2")  # GPT-2's config.json names no dtype
    assert spec.dtype == "bf16"
    assert "bfloat16 assumed" in spec.description


def test_dtype_key_newer_spelling_and_bad_value():
    cfg = config("llama-3.1-8b")
    del cfg["torch_dtype"]
    cfg["dtype"] = "float16"
    assert spec_from_hf_config(cfg, "x/config.json").dtype == "fp16"
    cfg["dtype"] = "float7"
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "x/config.json")
    assert err.value.field == "dtype"


def test_deepseek_v3_leaves_out_mtp_and_says_fp8():
    spec = from_hf("deepseek-v3")
    assert spec.num_layers == 61
    assert "multi-token-prediction" in spec.description
    assert "fp8" in spec.description
    assert spec.moe.router_bias and spec.moe.first_dense_layers == 3


def test_gemma2_even_layers_slide():
    layers = from_hf("gemma-2-9b").sliding_layers
    assert layers[0] and not layers[1] and layers[40] and not layers[41]


def test_gemma3_text_config_defaults_and_pattern():
    spec = from_hf("gemma-3-12b")
    assert (spec.vocab_size, spec.attention.head_dim, spec.max_context) == (262208, 256, 131072)
    assert spec.tie_embeddings and spec.attention.qk_norm
    assert [int(i) for i in spec.sliding_layers.nonzero()[0][:6]] == [0, 1, 2, 3, 4, 6]
    assert "Gemma3TextConfig defaults" in spec.description


def test_gemma3_layer_types_list_wins():
    cfg = copy.deepcopy(config("gemma-3-12b"))
    cfg["text_config"]["layer_types"] = ["sliding_attention", "full_attention"] * 24
    assert list(from_hf("gemma-3-12b", cfg).attention.sliding_pattern) == [True, False]


def test_qwen2_sliding_only_when_enabled():
    assert from_hf("qwen2.5-7b").attention.sliding_window is None  # use_sliding_window false
    cfg = {**config("qwen2.5-7b"), "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    layers = from_hf("qwen2.5-7b", cfg).sliding_layers
    assert not layers[:20].any() and layers[20:].all()


def test_qwen_moe_unsupported_layout_is_an_error():
    cfg = {**config("qwen3-30b-a3b"), "decoder_sparse_step": 2}
    with pytest.raises(SpecError) as err:
        from_hf("qwen3-30b-a3b", cfg)
    assert err.value.field == "decoder_sparse_step"
    cfg = {**config("qwen3-30b-a3b"), "mlp_only_layers": [0, 1]}
    assert from_hf("qwen3-30b-a3b", cfg).moe.first_dense_layers == 2


def test_qwen2_moe_shared_expert_with_gate():
    # Qwen1.5-MoE-A2.7B's shapes (config as stored in mlc-ai/mlc-llm model_preset.py "qwen2moe")
    cfg = {"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
           "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 24,
           "num_key_value_heads": 16, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60}
    V, H, L, E, k, Fe, Fs = 151936, 2048, 24, 60, 4, 1408, 5632
    attention = 4 * H * H + 3 * H  # q, k, v, o (MHA, D = 128) + q/k/v biases
    moe = E * 3 * H * Fe + 3 * H * Fs + H + H * E  # routed, shared, shared_expert_gate, router
    total = 2 * V * H + L * (attention + moe + 2 * H) + H
    spec = spec_from_hf_config(cfg, "x/qwen1.5-moe-a2.7b/config.json")
    assert spec.params_total == total
    assert spec.params_active == total - L * (E - k) * 3 * H * Fe
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated
    assert abs(spec.params_total / 14.3e9 - 1) < 0.005 and round(spec.params_active / 1e9, 1) == 2.7


def test_gemma_v1_tied_geglu():
    # gemma-2b's config.json as stored in mlc-ai/mlc-llm model_preset.py ("gemma_2b")
    cfg = {"architectures": ["GemmaForCausalLM"], "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048,
           "intermediate_size": 16384, "max_position_embeddings": 8192, "num_attention_heads": 8,
           "num_hidden_layers": 18, "num_key_value_heads": 1, "torch_dtype": "bfloat16", "vocab_size": 256000}
    V, H, L, Hq, Hkv, D, F = 256000, 2048, 18, 8, 1, 256, 16384
    total = V * H + L * (2 * H * Hq * D + 2 * H * Hkv * D + 3 * H * F + 2 * H) + H  # tied head
    spec = spec_from_hf_config(cfg, "x/gemma-2b/config.json")
    assert spec.tie_embeddings and spec.params_total == total == 2_506_172_416


def test_gpt_neox_layernorm_fused_biases():
    cfg = {"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 64, "intermediate_size": 256,
           "max_position_embeddings": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 100, "torch_dtype": "float16"}
    V, H, L, F = 100, 64, 2, 256
    layer = (3 * H * H + 3 * H) + (H * H + H) + (H * F + F + F * H + H) + 2 * (2 * H)
    spec = spec_from_hf_config(cfg, "x/neox/config.json")
    assert spec.params_total == 2 * V * H + L * layer + 2 * H  # embed_in, embed_out, final LayerNorm
    assert spec.norm == "layernorm" and spec.attention.fused_qkv


def test_every_supported_architecture_has_a_mapping():
    assert set(ARCHITECTURES) >= {
        "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM",
        "Qwen3MoeForCausalLM", "MixtralForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration", "Phi3ForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
        "GPT2LMHeadModel", "GPTNeoXForCausalLM", "GptOssForCausalLM",
    }


def test_catalog_loads_a_config_folder():
    from calc.spec.catalog import load_model

    spec = load_model(str(FIXTURES / "mistral-7b"))
    assert spec.name == "mistral-7b" and spec.attention.sliding_window == 4096


def test_gpt_oss_maps_sinks_windows_and_mxfp4_experts():
    hf, cat = from_hf("gpt-oss-20b"), from_yaml("gpt-oss-20b")
    # 20,914,757,184 parameters is derived by hand from the same config in tests/calc/cost/test_gpt_oss.py
    assert hf.params_total == cat.params_total == 20_914_757_184
    assert hf.weight_bytes() == cat.weight_bytes()  # MXFP4 experts, the rest bf16
    assert (hf.default_weight_dtype, hf.quantized) == ("mxfp4", "experts")
    a = hf.attention
    assert a.sinks and a.qkv_bias and a.o_bias and a.sliding_window == 128 and tuple(a.sliding_pattern) == (True, False)
    assert hf.moe.router_bias and hf.mlp.bias and hf.moe.num_shared_experts == 0
    # without layer_types the even layers slide (transformers' GptOssConfig default)
    cfg = {k: v for k, v in config("gpt-oss-20b").items() if k != "layer_types"}
    assert tuple(from_hf("gpt-oss-20b", cfg).attention.sliding_pattern) == (True, False)
    # MXFP4 on every linear layer (nothing kept out) quantises them all
    cfg = copy.deepcopy(config("gpt-oss-20b"))
    cfg["quantization_config"]["modules_to_not_convert"] = []
    assert from_hf("gpt-oss-20b", cfg).quantized == "linear"
