"""Tensor-name mapping between the transformers DeepSeek-V4 port ("port"/HF scheme) and the
released DeepSeek checkpoints ("released" scheme, spec §4). See docs/deepseek-v4-hf-port.md.

port_to_released(name, tensor) -> list of (released_name, tensor) (experts are split per expert)
The inverse direction for the fused experts is documented (stack w1/w3 per expert, cat on dim 1).

Run `python v4_naming.py` to print the markdown table for the tiny-v4 model (used in the doc).
"""

import re

# (port regex, released replacement) for a layer-local suffix (after `model.layers.N.` or `mtp.0.`).
_LAYER_RULES = [
    (r"self_attn\.q_a_proj\.weight", "attn.wq_a.weight"),
    (r"self_attn\.q_a_norm\.weight", "attn.q_norm.weight"),
    (r"self_attn\.q_b_proj\.weight", "attn.wq_b.weight"),
    (r"self_attn\.kv_proj\.weight", "attn.wkv.weight"),
    (r"self_attn\.kv_norm\.weight", "attn.kv_norm.weight"),
    (r"self_attn\.o_a_proj\.weight", "attn.wo_a.weight"),
    (r"self_attn\.o_b_proj\.weight", "attn.wo_b.weight"),
    (r"self_attn\.sinks", "attn.attn_sink"),
    (r"self_attn\.compressor\.kv_proj\.weight", "attn.compressor.wkv.weight"),
    (r"self_attn\.compressor\.gate_proj\.weight", "attn.compressor.wgate.weight"),
    (r"self_attn\.compressor\.position_bias", "attn.compressor.ape"),
    (r"self_attn\.compressor\.kv_norm\.weight", "attn.compressor.norm.weight"),
    (r"self_attn\.compressor\.indexer\.q_b_proj\.weight", "attn.indexer.wq_b.weight"),
    (r"self_attn\.compressor\.indexer\.scorer\.weights_proj\.weight", "attn.indexer.weights_proj.weight"),
    (r"self_attn\.compressor\.indexer\.kv_proj\.weight", "attn.indexer.compressor.wkv.weight"),
    (r"self_attn\.compressor\.indexer\.gate_proj\.weight", "attn.indexer.compressor.wgate.weight"),
    (r"self_attn\.compressor\.indexer\.position_bias", "attn.indexer.compressor.ape"),
    (r"self_attn\.compressor\.indexer\.kv_norm\.weight", "attn.indexer.compressor.norm.weight"),
    (r"input_layernorm\.weight", "attn_norm.weight"),
    (r"post_attention_layernorm\.weight", "ffn_norm.weight"),
    (r"attn_hc\.fn", "hc_attn_fn"),
    (r"attn_hc\.base", "hc_attn_base"),
    (r"attn_hc\.scale", "hc_attn_scale"),
    (r"ffn_hc\.fn", "hc_ffn_fn"),
    (r"ffn_hc\.base", "hc_ffn_base"),
    (r"ffn_hc\.scale", "hc_ffn_scale"),
    (r"mlp\.gate\.weight", "ffn.gate.weight"),
    (r"mlp\.gate\.e_score_correction_bias", "ffn.gate.bias"),
    (r"mlp\.gate\.tid2eid", "ffn.gate.tid2eid"),
    (r"mlp\.shared_experts\.gate_proj\.weight", "ffn.shared_experts.w1.weight"),
    (r"mlp\.shared_experts\.up_proj\.weight", "ffn.shared_experts.w3.weight"),
    (r"mlp\.shared_experts\.down_proj\.weight", "ffn.shared_experts.w2.weight"),
    # MTP-only tensors (names chosen by T-Rex for HF-scheme checkpoints; the port has no MTP)
    (r"e_proj\.weight", "e_proj.weight"),
    (r"h_proj\.weight", "h_proj.weight"),
    (r"enorm\.weight", "enorm.weight"),
    (r"hnorm\.weight", "hnorm.weight"),
    (r"norm\.weight", "norm.weight"),
    (r"hc_head\.hc_fn", "hc_head_fn"),
    (r"hc_head\.hc_base", "hc_head_base"),
    (r"hc_head\.hc_scale", "hc_head_scale"),
]

_GLOBAL_RULES = {
    "model.embed_tokens.weight": "embed.weight",
    "lm_head.weight": "head.weight",
    "model.norm.weight": "norm.weight",
    "model.hc_head.hc_fn": "hc_head_fn",
    "model.hc_head.hc_base": "hc_head_base",
    "model.hc_head.hc_scale": "hc_head_scale",
}


def _split_prefix(name):
    m = re.match(r"^(model\.layers\.(\d+)\.)(.*)$", name)
    if m:
        return m.group(1), f"layers.{m.group(2)}.", m.group(3)
    m = re.match(r"^(mtp\.(\d+)\.)(.*)$", name)
    if m:
        return m.group(1), f"mtp.{m.group(2)}.", m.group(3)
    return None, None, name


def port_to_released_name(name: str) -> str:
    """Released name for a non-expert port tensor name (raises KeyError if unknown)."""
    if name in _GLOBAL_RULES:
        return _GLOBAL_RULES[name]
    _, rel_prefix, suffix = _split_prefix(name)
    if rel_prefix is None:
        raise KeyError(name)
    for pattern, repl in _LAYER_RULES:
        if re.fullmatch(pattern, suffix):
            return rel_prefix + repl
    raise KeyError(name)


def port_to_released(name, tensor):
    """[(released_name, tensor)] for one port tensor; fused experts are split per expert."""
    _, rel_prefix, suffix = _split_prefix(name)
    if suffix == "mlp.experts.gate_up_proj":  # [E, 2I, d] = cat(w1, w3) on dim 1
        inter = tensor.shape[1] // 2
        out = []
        for e in range(tensor.shape[0]):
            out.append((f"{rel_prefix}ffn.experts.{e}.w1.weight", tensor[e, :inter].contiguous()))
            out.append((f"{rel_prefix}ffn.experts.{e}.w3.weight", tensor[e, inter:].contiguous()))
        return out
    if suffix == "mlp.experts.down_proj":  # [E, d, I], each [d, I] = w2 as is
        return [(f"{rel_prefix}ffn.experts.{e}.w2.weight", tensor[e].contiguous()) for e in range(tensor.shape[0])]
    return [(port_to_released_name(name), tensor)]


def state_dict_to_released(state_dict):
    out = {}
    for name, tensor in state_dict.items():
        for rname, rt in port_to_released(name, tensor):
            out[rname] = rt
    return out


def _markdown_table():
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import transformers.utils.logging as hf_logging
    from transformers import DeepseekV4ForCausalLM

    from v4_configs import port_config

    hf_logging.set_verbosity_error()
    model = DeepseekV4ForCausalLM(port_config("tiny-v4"))
    kinds = {0: "SWA + hash", 1: "CSA + hash", 2: "HCA + score", 3: "CSA + score"}
    rows = []
    sd = model.state_dict()
    for name, t in sd.items():
        prefix, _, _ = _split_prefix(name)
        layer = int(prefix.split(".")[2]) if prefix else None
        if layer == 3:
            continue
        where = kinds[layer] if layer is not None else "global"
        rel = port_to_released(name, t)
        if len(rel) > 1:
            rel_desc = ", ".join(sorted({re.sub(r"experts\.\d+\.", "experts.{e}.", r) for r, _ in rel}))
            rel_shape = str(list(rel[0][1].shape))
        else:
            rel_desc, rel_shape = rel[0][0], str(list(rel[0][1].shape))
        rows.append(f"| {where} | `{name}` | {list(t.shape)} {str(t.dtype).replace('torch.', '')} | `{rel_desc}` | {rel_shape} |")
    print("| layer kind (tiny-v4) | port name | port shape, dtype | released name | released shape |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    _markdown_table()
