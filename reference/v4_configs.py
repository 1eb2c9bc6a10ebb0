"""The two shipped tiny DeepSeek-V4 configs (released key scheme) and their conversion to the
transformers port's config (layer_types + compress_rates), shared by the oracle scripts."""

import copy

_COMMON = {
    "model_type": "deepseek_v4",
    "architectures": ["DeepseekV4ForCausalLM"],
    "num_key_value_heads": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "hidden_act": "silu",
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "n_shared_experts": 1,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "attention_bias": False,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "max_position_embeddings": 4096,
}

RELEASED_CONFIGS = {
    "tiny-v4": {
        **_COMMON,
        "vocab_size": 512,
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "compress_ratios": [0, 4, 16, 4, 0],
        "num_hash_layers": 2,
        "num_attention_heads": 4,
        "head_dim": 96,
        "qk_rope_head_dim": 32,
        "q_lora_rank": 32,
        "o_groups": 2,
        "o_lora_rank": 16,
        "sliding_window": 8,
        "index_n_heads": 4,
        "index_head_dim": 32,
        "index_topk": 4,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 4,
            "original_max_position_embeddings": 32,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    },
    "tiny-v4-clamp": {
        **_COMMON,
        "vocab_size": 512,
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "compress_ratios": [8, 4, 8, 0],
        "num_hash_layers": 1,
        "num_attention_heads": 2,
        "head_dim": 64,
        "qk_rope_head_dim": 16,
        "q_lora_rank": 32,
        "o_groups": 1,
        "o_lora_rank": 16,
        "sliding_window": 4,
        "index_n_heads": 2,
        "index_head_dim": 16,
        "index_topk": 3,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "routed_scaling_factor": 2.5,
        "swiglu_limit": 0.5,
    },
}

# Parity input sequence lengths per config (batch 2 each).
CASES = {"tiny-v4": [64, 61, 3], "tiny-v4-clamp": [24, 7]}


def released_to_port_kwargs(released: dict) -> dict:
    """Port-scheme DeepseekV4Config kwargs for a released-scheme config.

    The port maps `compress_ratios` only for ratios {0, 4, 128}; any other ratio needs the
    explicit `layer_types` + `compress_rates` form. Ratio 4 is CSA (overlap + indexer), any other
    non-zero ratio HCA; the port keeps one ratio per attention type. The last
    `num_nextn_predict_layers` entries of `compress_ratios` belong to the MTP block(s), which the
    port does not instantiate."""
    cfg = copy.deepcopy(released)
    n_layers = cfg["num_hidden_layers"]
    ratios = cfg.pop("compress_ratios")
    main_ratios = ratios[:n_layers]
    layer_types, rates = [], {}
    for r in main_ratios:
        if r == 0:
            layer_types.append("sliding_attention")
        elif r == 4:
            layer_types.append("compressed_sparse_attention")
            rates["compressed_sparse_attention"] = 4
        else:
            layer_types.append("heavily_compressed_attention")
            if rates.get("heavily_compressed_attention", r) != r:
                raise ValueError("the port supports one HCA ratio per model")
            rates["heavily_compressed_attention"] = r
    rates.setdefault("compressed_sparse_attention", 4)
    rates.setdefault("heavily_compressed_attention", 128)
    n_hash = cfg.pop("num_hash_layers")
    cfg["layer_types"] = layer_types
    cfg["compress_rates"] = rates
    cfg["mlp_layer_types"] = ["hash_moe"] * min(n_layers, n_hash) + ["moe"] * max(0, n_layers - n_hash)
    cfg["partial_rotary_factor"] = cfg.pop("qk_rope_head_dim") / cfg["head_dim"]
    rope_scaling = cfg.pop("rope_scaling", None)
    main = {"rope_type": "default", "rope_theta": float(cfg["rope_theta"]),
            "partial_rotary_factor": cfg["partial_rotary_factor"]}
    compress = {"rope_type": "default", "rope_theta": float(cfg["compress_rope_theta"]),
                "partial_rotary_factor": cfg["partial_rotary_factor"]}
    if rope_scaling is not None:
        assert rope_scaling.get("type", rope_scaling.get("rope_type")) == "yarn"
        compress.update({
            "rope_type": "yarn",
            "factor": float(rope_scaling["factor"]),
            "original_max_position_embeddings": int(rope_scaling["original_max_position_embeddings"]),
            "beta_fast": float(rope_scaling["beta_fast"]),
            "beta_slow": float(rope_scaling["beta_slow"]),
            # The official reference applies no YaRN attention temperature (mscale).
            "attention_factor": 1.0,
        })
    cfg["rope_parameters"] = {"main": main, "compress": compress}
    # Keys that the port does not know (kept in released_config.json only).
    for key in ("topk_method", "torch_dtype"):
        cfg.pop(key, None)
    cfg["output_router_logits"] = False
    cfg["use_cache"] = False
    return cfg


def port_config(name: str):
    from transformers import DeepseekV4Config

    cfg = DeepseekV4Config(**released_to_port_kwargs(RELEASED_CONFIGS[name]))
    cfg._attn_implementation = "eager"
    return cfg
