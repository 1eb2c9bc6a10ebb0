"""Spec-based DeepSeek-V4 Multi-Token-Prediction block (spec §2.10), which the transformers port
does not implement. Built from the port's own decoder layer class (SWA attention + score-routed
MoE; the float64 oracle copy by default) plus e_proj / h_proj / enorm / hnorm / norm / hc_head.

    X^M_j = e_proj(enorm(embed(ids[t+1]))) + h_proj(hnorm(X^L_t,j))   (j = 0..hc_mult-1)
    X^M   = Block_mtp(X^M)        positions t = 0..S-2, sliding-window causal
    logits^M_t = lm_head(norm(HCHead_mtp(X^M)_t))                      target ids[t+2]

X^L are the main model's final residual streams (before its HC head), captured with
`capture_final_streams`. Embedding and LM head are the main model's (shared).
Parameter names (state_dict of MTPBlock) are the port's decoder-layer names; in a checkpoint
they are stored under `mtp.0.` (docs/deepseek-v4-hf-port.md §1.2).

Run `python mtp_reference.py` to gradcheck the module in float64 (selection fixed).
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

from transformers.masking_utils import create_sliding_window_causal_mask

from oracle_port import oracle

MTP_PREFIX = "mtp.0."


def mtp_config(config):
    """A one-layer config describing the MTP block: SWA attention, score-routed MoE."""
    cfg = copy.deepcopy(config)
    cfg.num_hidden_layers = 1
    cfg.layer_types = ["sliding_attention"]
    cfg.mlp_layer_types = ["moe"]
    return cfg


class MTPBlock(oracle.DeepseekV4DecoderLayer):
    def __init__(self, config, port_module=oracle):
        cfg = mtp_config(config)
        super().__init__(cfg, 0)
        d = cfg.hidden_size
        self.mtp_config = cfg
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.enorm = port_module.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
        self.hnorm = port_module.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
        self.norm = port_module.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
        self.hc_head = port_module.DeepseekV4HyperHead(cfg)
        self.rotary_emb = port_module.DeepseekV4RotaryEmbedding(cfg)

    def mtp_logits(self, final_streams, input_ids, embed_tokens, lm_head):
        """final_streams [B, S, hc, d] (X^L), input_ids [B, S] -> logits^M [B, S-1, V] for t = 0..S-2."""
        batch, seq = input_ids.shape
        next_emb = embed_tokens(input_ids[:, 1:])  # e_t = embed(ids[t+1])
        streams = final_streams[:, : seq - 1]
        x = self.e_proj(self.enorm(next_emb)).unsqueeze(2) + self.h_proj(self.hnorm(streams))
        position_ids = torch.arange(seq - 1, device=x.device).unsqueeze(0)
        mask = create_sliding_window_causal_mask(
            config=self.mtp_config, inputs_embeds=next_emb, attention_mask=None, cache=None,
            position_ids=position_ids,
        )
        position_embeddings = {
            "main": self.rotary_emb(next_emb, position_ids=position_ids, layer_type="main"),
            "compress": self.rotary_emb(next_emb, position_ids=position_ids, layer_type="compress"),
        }
        x = super().forward(
            x, input_ids=None, position_embeddings=position_embeddings, position_ids=position_ids,
            attention_mask=mask, cache=None,
        )
        return lm_head(self.norm(self.hc_head(x)))

    def checkpoint_state_dict(self):
        """{mtp.0.<name>: tensor} for every persistent tensor."""
        return {MTP_PREFIX + k: v for k, v in self.state_dict().items()}


def mtp_loss(mtp_logits, labels):
    """Mean CE of logits^M_t vs labels[t+2] over t = 0..S-3 with labels[t+2] != -100."""
    seq = labels.shape[1]
    if seq < 3:
        return mtp_logits.sum() * 0.0
    logits = mtp_logits[:, : seq - 2]
    targets = labels[:, 2:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def capture_final_streams(model):
    """Registers a pre-hook on model.model.hc_head; returns (store dict, handle). store['X'] = X^L."""
    store = {}

    def hook(_module, args):
        store["X"] = args[0]

    handle = model.model.hc_head.register_forward_pre_hook(hook)
    return store, handle


def _gradcheck():
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import transformers.utils.logging as hf_logging

    from v4_configs import port_config

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = port_config("tiny-v4")
    block = MTPBlock(config)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.1)
            elif name.endswith(("norm.weight",)):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0, 0.5)
        block.mlp.gate.e_score_correction_bias.normal_(0, 0.1)
    block = block.double()
    from oracle_port import set_float64_rope

    set_float64_rope(block, block.mtp_config)
    d, vocab, hc = config.hidden_size, 32, config.hc_mult
    embed = nn.Embedding(vocab, d).double()
    head = nn.Linear(d, vocab, bias=False).double()
    seq = 6
    ids = torch.randint(0, vocab, (1, seq))
    streams = torch.randn(1, seq, hc, d, dtype=torch.float64, requires_grad=True)
    names = [n for n, _ in block.named_parameters()]
    params = {n: p.detach().clone().requires_grad_(True) for n, p in block.named_parameters()}

    # Selection fixed: record the routed experts at the unperturbed point and check they never change.
    ref_idx = {}

    def route_hook(_m, _inp, out):
        ref_idx.setdefault("idx", out[2].clone())
        assert torch.equal(out[2], ref_idx["idx"]), "router selection changed under perturbation"

    block.mlp.gate.register_forward_hook(route_hook)

    def fn(x, *flat_params):
        return _call_with_params(block, dict(zip(names, flat_params)), x, ids, embed, head)

    inputs = (streams, *[params[n] for n in names])
    # Every parameter tensor and X^L at once in fast mode (a random-direction check of the full
    # Jacobian), then the exact elementwise Jacobian for the MTP-specific 1-D tensors (norms, HC head, sinks, mHC).
    ok_fast = torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)
    small = [n for n in names if n.startswith(("enorm", "hnorm", "norm", "hc_head.hc_base", "hc_head.hc_scale",
                                               "self_attn.sinks", "attn_hc.base", "attn_hc.scale",
                                               "ffn_hc.scale", "input_layernorm"))]

    def fn_small(x, *small_params):
        p = {n: params[n] for n in names}
        p.update(zip(small, small_params))
        return _call_with_params(block, p, x, ids, embed, head)

    ok_full = torch.autograd.gradcheck(fn_small, (streams.detach(), *[params[n] for n in small]), eps=1e-6, atol=1e-7,
                                       rtol=1e-5, fast_mode=False)
    print(f"MTP gradcheck float64, S={seq}: fast mode over X^L + all {len(names)} parameter tensors: "
          f"{'PASS' if ok_fast else 'FAIL'}; exact Jacobian over {len(small)} tensors ({', '.join(small)}): "
          f"{'PASS' if ok_full else 'FAIL'}")
    return ok_fast and ok_full


def _call_with_params(block, params, x, ids, embed, head):
    from torch.nn.utils.stateless import _reparametrize_module

    with _reparametrize_module(block, params):
        logits = block.mtp_logits(x, ids, embed, head)
    # a 3-vector output keeps gradcheck cheap while depending on every position
    return torch.stack([mtp_loss(logits, ids), (logits[..., :8] ** 2).mean(), logits[0, -1, 3]])


if __name__ == "__main__":
    import sys

    sys.exit(0 if _gradcheck() else 1)
