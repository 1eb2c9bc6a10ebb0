"""Builds the DeepSeek-V4 parity fixtures under tests/fixtures/v4/ (see reference/README.md).

For each tiny config: a random DeepseekV4ForCausalLM (transformers port, float64 oracle copy, see
oracle_port.py) + a spec MTP block (mtp_reference.py), saved with save_pretrained (float32
safetensors) plus the mtp.0.* tensors; then for each input case the float64 forward/backward:
logits, loss_lm, loss_mtp and the gradient of L = loss_lm + MTP_WEIGHT * loss_mtp for every
parameter (port names, mtp.0.* for MTP). Every discrete choice (router top-k, indexer top-k) must
have a relative margin > MIN_MARGIN, else the model seed is advanced and everything is rebuilt.

Usage: reference/.venv/bin/python reference/make_v4_fixtures.py [--out tests/fixtures/v4]
"""

import argparse
import json
import os
import pathlib
import shutil
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import transformers  # noqa: E402
import transformers.utils.logging as hf_logging  # noqa: E402

from mtp_reference import MTP_PREFIX, MTPBlock, capture_final_streams, mtp_loss  # noqa: E402
from oracle_port import oracle, set_float64_rope  # noqa: E402
from v4_configs import CASES, RELEASED_CONFIGS, port_config  # noqa: E402
from v4_naming import state_dict_to_released  # noqa: E402

MTP_WEIGHT = 0.3
MIN_MARGIN = 1e-4
BATCH = 2
# Cases with some labels = -100 (SFT-style loss mask).
MASKED_CASE = {"tiny-v4": 61, "tiny-v4-clamp": 24}
BASE_SEED = {"tiny-v4": 1000, "tiny-v4-clamp": 2000}


def randomise(model, mtp, config, gen):
    """N(0, 0.02)-ish weights, but no trivially zero/one path: small random sinks, ape, mHC
    base/scale, norm weights, router bias; valid random tid2eid (distinct experts per row)."""

    def normal(t, std, mean=0.0):
        t.copy_(mean + std * torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype))

    with torch.no_grad():
        for module in (model, mtp):
            for name, p in module.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    normal(p, 0.1, 1.0)
                elif leaf == "sinks":
                    normal(p, 0.5)
                elif leaf == "position_bias":
                    normal(p, 0.5)
                elif leaf in ("base", "hc_base"):
                    normal(p, 0.5)
                elif leaf in ("scale", "hc_scale"):
                    normal(p, 0.2, 1.0)
                elif name.endswith("mlp.gate.weight"):
                    normal(p, 0.1)  # wider router logits: larger top-k margins
                elif name.endswith("embed_tokens.weight"):
                    normal(p, 1.0)
                else:
                    normal(p, 0.02 if p.dim() >= 2 and "experts" not in name else 0.05)
            for name, b in module.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    normal(b, 0.1)
                elif name.endswith("tid2eid"):
                    n_experts = config.n_routed_experts
                    rows = [torch.randperm(n_experts, generator=gen)[: b.shape[1]] for _ in range(b.shape[0])]
                    b.copy_(torch.stack(rows).to(b.dtype))


class MarginRecorder:
    """Records the relative margin of every top-k decision (router and indexer)."""

    def __init__(self, model, mtp):
        self.router = float("inf")
        self.indexer = float("inf")
        self.indexer_decisions = 0
        self.indexer_zero_ties = 0
        self.zero_relu = float("inf")
        self.router_decisions = 0
        self.handles = []
        for module in list(model.modules()) + list(mtp.modules()):
            if isinstance(module, oracle.DeepseekV4TopKRouter):
                self.handles.append(module.register_forward_hook(self._router_hook))
            elif isinstance(module, oracle.DeepseekV4Indexer):
                self.handles.append(module.register_forward_hook(self._indexer_outer_hook))
                self.handles.append(module.scorer.register_forward_hook(self._scorer_hook))
        self._index_ctx = None

    @staticmethod
    def _row_margin(values, k, exact_ties_ok=False):
        """values [N, T] (finite or -inf), k: gap between the k-th and (k+1)-th largest, relative to
        the row's largest finite magnitude; rows with <= k finite entries make no decision.
        exact_ties_ok: a k-th/(k+1)-th pair that is exactly 0.0 == 0.0 (indexer blocks whose ReLU
        terms all vanish; exactly reproducible in fp32, broken by lowest index) is not a margin
        failure; returns (min margin, decisions, exact zero ties)."""
        finite = torch.isfinite(values)
        n_fin = finite.sum(-1)
        v = torch.where(finite, values, torch.full_like(values, -1e300))
        srt = v.sort(dim=-1, descending=True).values
        mags = torch.where(finite, values.abs(), torch.zeros_like(values)).amax(-1).clamp_min(1e-300)
        decide = n_fin > k
        if not decide.any():
            return float("inf"), 0, 0
        gap = (srt[:, k - 1] - srt[:, k]) / mags
        ties = decide & (srt[:, k - 1] == 0) & (srt[:, k] == 0)
        if exact_ties_ok:
            gap = torch.where(ties, torch.full_like(gap, float("inf")), gap)
        return gap[decide].min().item(), int(decide.sum()), int(ties.sum())

    def _router_hook(self, module, inputs, _out):
        with torch.no_grad():
            flat = inputs[0].reshape(-1, module.hidden_dim)
            scores = module.score_fn(F.linear(flat, module.weight)) + module.e_score_correction_bias
            m, n, _ = self._row_margin(scores, module.top_k)
            self.router = min(self.router, m)
            self.router_decisions += n

    def _scorer_hook(self, _module, inputs, out):
        self._index_scores = out.detach()
        q, keys = inputs[0].detach(), inputs[1].detach()  # [B, S, H, D], [B, T, D]
        if keys.shape[1] == 0:
            return
        dots = torch.einsum("bshd,btd->bsht", q, keys)
        self._max_dot = dots.amax(dim=2)  # [B, S, T]
        self._dot_scale = dots.abs().amax(dim=(2, 3))  # [B, S]

    def _indexer_outer_hook(self, module, inputs, _out):
        with torch.no_grad():
            scores = self._index_scores  # [B, S, T]
            position_ids = inputs[2]
            t = scores.shape[-1]
            if t == 0:
                return
            threshold = (position_ids + 1) // module.compress_rate
            invisible = torch.arange(t).view(1, 1, -1) >= threshold.unsqueeze(-1)
            scores = scores.masked_fill(invisible, float("-inf"))
            k = min(module.index_topk, t)
            m, n, ties = self._row_margin(scores.reshape(-1, t), k, exact_ties_ok=True)
            # Blocks scored exactly 0 (every head's q.k <= 0) must stay 0 in fp32: their largest
            # q.k must be clearly negative (relative to the row's largest |q.k|).
            zero_blocks = (scores == 0) & ~invisible
            if zero_blocks.any():
                rel = (-self._max_dot / self._dot_scale.unsqueeze(-1).clamp_min(1e-300))[zero_blocks]
                self.zero_relu = min(self.zero_relu, rel.min().item())
            self.indexer = min(self.indexer, m)
            self.indexer_decisions += n
            self.indexer_zero_ties += ties

    def remove(self):
        for h in self.handles:
            h.remove()


def clamp_margin(model, mtp, limit):
    """Smallest |pre-activation - clamp bound| / limit over all SwiGLU clamps (recorded only)."""
    worst = {"v": float("inf")}
    handles = []

    def check(x):
        worst["v"] = min(worst["v"], ((x - limit).abs().min().item()) / limit,
                         ((x + limit).abs().min().item()) / limit)

    def experts_hook(module, args):
        pass

    def linear_hook(module, _inp, out):
        check(out.detach())

    for module in list(model.modules()) + list(mtp.modules()):
        if isinstance(module, oracle.DeepseekV4MLP):
            handles.append(module.gate_proj.register_forward_hook(linear_hook))
            handles.append(module.up_proj.register_forward_hook(linear_hook))
        if isinstance(module, oracle.DeepseekV4Experts):
            orig = module._apply_gate

            def patched(gate_up, _orig=orig):
                check(gate_up.detach())
                return _orig(gate_up)

            module._apply_gate = patched
            handles.append(module)
    return worst, handles


def make_inputs(name, seq, vocab):
    gen = torch.Generator().manual_seed(7919 * seq + BASE_SEED[name])
    ids = torch.randint(0, vocab, (BATCH, seq), generator=gen)
    labels = ids.clone()
    masked = MASKED_CASE[name] == seq
    if masked:
        # SFT-style: a prompt prefix of sequence 0 and a scattered set in sequence 1 are not trained.
        labels[0, : seq // 3] = -100
        labels[1, torch.randperm(seq, generator=gen)[: seq // 4]] = -100
    return ids, labels, masked


def run_case(model, mtp, config, ids, labels):
    """float64 forward/backward: (logits, loss_lm, loss_mtp, grads, margins)."""
    model.zero_grad(set_to_none=True)
    mtp.zero_grad(set_to_none=True)
    store, handle = capture_final_streams(model)
    out = model(input_ids=ids, use_cache=False, output_router_logits=False)
    handle.remove()
    logits = out.logits
    vocab = logits.shape[-1]
    # HF convention: labels = input_ids, shifted inside the loss; mean over non-ignored targets.
    loss_lm = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100)
    mtp_logits = mtp.mtp_logits(store["X"], ids, model.model.embed_tokens, model.lm_head)
    loss_mtp = mtp_loss(mtp_logits, labels)
    total = loss_lm + MTP_WEIGHT * loss_mtp
    total.backward()
    grads = {}
    for n, p in model.named_parameters():
        grads[n] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    for n, p in mtp.named_parameters():
        grads[MTP_PREFIX + n] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return logits.detach(), loss_lm.detach(), loss_mtp.detach(), grads


def build(name, seed):
    config = port_config(name)
    torch.manual_seed(seed)
    model = oracle.DeepseekV4ForCausalLM(config)
    mtp = MTPBlock(config)
    gen = torch.Generator().manual_seed(seed)
    model.float()
    mtp.float()
    randomise(model, mtp, config, gen)
    model.float()  # parameters are float32-representable: the checkpoint holds exactly them
    mtp.float()
    return config, model, mtp


def to_double(config, model, mtp):
    model.double()
    mtp.double()
    set_float64_rope(model, config)
    set_float64_rope(mtp, mtp.mtp_config)
    model.eval()
    mtp.eval()
    return model, mtp


def _stable_topk(self, k, dim=-1, largest=True, sorted=True):
    """torch.topk with ties broken by lowest index (the oracle's / T-Rex's rule)."""
    order = self.sort(dim=dim, descending=largest, stable=True)
    idx = order.indices.narrow(dim, 0, k)
    return torch.return_types.topk((self.gather(dim, idx), idx))


def check_against_unmodified_port(model_dir, cases, results):
    """Loads the saved checkpoint in the unmodified port (float32) and compares logits, once with
    torch.topk's own tie order and once with Tensor.topk temporarily replaced by the stable
    lowest-index tie-break (the only intended difference, D11). Returns (raw, stable) errors."""
    from transformers import DeepseekV4ForCausalLM

    port_model = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    port_model.eval()
    errs = []
    for stable in (False, True):
        worst = 0.0
        original = torch.Tensor.topk
        if stable:
            torch.Tensor.topk = _stable_topk
        try:
            with torch.no_grad():
                for seq, (ids, logits64) in zip(cases, results):
                    logits32 = port_model(input_ids=ids, use_cache=False).logits.double()
                    err = ((logits32 - logits64).abs().max() / logits64.abs().max()).item()
                    worst = max(worst, err)
        finally:
            torch.Tensor.topk = original
        errs.append(worst)
    return errs


def check_released_loading(released_dir, model_dir, model):
    """Loads the released-scheme tensors through transformers' own released->port conversion
    (conversion_mapping.py, with the port-scheme config.json since the port rejects ratio 16 in
    compress_ratios) and checks every tensor equals the port-scheme one (validates v4_naming.py)."""
    import tempfile

    from transformers import DeepseekV4ForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(released_dir / "model.safetensors", pathlib.Path(tmp) / "model.safetensors")
        shutil.copy(model_dir / "config.json", pathlib.Path(tmp) / "config.json")
        loaded = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    ref = {k: v.float() for k, v in model.state_dict().items()}
    got = loaded.state_dict()
    bad = [k for k in ref if k not in got or not torch.equal(got[k].float(), ref[k])]
    return bad


def generate(name, out_root):
    released = RELEASED_CONFIGS[name]
    seqs = CASES[name]
    inputs = {seq: make_inputs(name, seq, released["vocab_size"]) for seq in seqs}
    for attempt in range(100):
        seed = BASE_SEED[name] + attempt
        config, model, mtp = build(name, seed)
        fp32_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        mtp_state = {k: v.detach().clone() for k, v in mtp.checkpoint_state_dict().items()}
        model, mtp = to_double(config, model, mtp)
        recorder = MarginRecorder(model, mtp)
        worst_clamp, clamp_handles = clamp_margin(model, mtp, config.swiglu_limit)
        results = {}
        for seq in seqs:
            ids, labels, masked = inputs[seq]
            results[seq] = run_case(model, mtp, config, ids, labels)
        recorder.remove()
        for h in clamp_handles:
            if isinstance(h, torch.nn.Module):
                del h._apply_gate
            else:
                h.remove()
        ok = recorder.router > MIN_MARGIN and recorder.indexer > MIN_MARGIN and recorder.zero_relu > MIN_MARGIN
        print(f"{name}: seed {seed}: min router margin {recorder.router:.3e} ({recorder.router_decisions} decisions), "
              f"min indexer margin {recorder.indexer:.3e} ({recorder.indexer_decisions} decisions, "
              f"{recorder.indexer_zero_ties} exact 0 == 0 ties at the boundary), "
              f"min zero-block ReLU margin {recorder.zero_relu:.3e}"
              f"{'' if ok else ' -> retry'}", flush=True)
        if ok:
            break
    else:
        raise RuntimeError(f"{name}: no seed with margins > {MIN_MARGIN}")

    out_dir = out_root / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model_dir = out_dir / "model"
    model_dir.mkdir(parents=True)

    # Checkpoint: a float32 copy of the model saved with save_pretrained, then the MTP tensors added.
    save_model = oracle.DeepseekV4ForCausalLM(config)
    save_model.load_state_dict(fp32_state)
    save_model.float()
    save_model.config.architectures = ["DeepseekV4ForCausalLM"]
    save_model.save_pretrained(model_dir, safe_serialization=True, save_original_format=False)
    ckpt_path = model_dir / "model.safetensors"
    tensors = load_file(ckpt_path)
    assert set(tensors) == set(fp32_state), "save_pretrained must store every persistent tensor"
    for k, v in mtp_state.items():
        tensors[k] = v.contiguous()
    save_file(tensors, ckpt_path, metadata={"format": "pt"})
    for extra in ("generation_config.json",):
        if (model_dir / extra).exists():
            (model_dir / extra).unlink()

    with open(out_dir / "released_config.json", "w") as f:
        json.dump(released, f, indent=2)
        f.write("\n")

    # Released-scheme copy of the same weights (spec §4 names, experts split, MTP under mtp.0.).
    released_dir = out_dir / "released"
    released_dir.mkdir()
    released_tensors = state_dict_to_released({k: v for k, v in tensors.items()})
    save_file({k: v.contiguous() for k, v in released_tensors.items()}, released_dir / "model.safetensors",
              metadata={"format": "pt"})
    shutil.copy(out_dir / "released_config.json", released_dir / "config.json")

    # Cross-checks against the unmodified port.
    port_err_raw, port_err = check_against_unmodified_port(
        model_dir, seqs, [(inputs[s][0], results[s][0]) for s in seqs])
    print(f"{name}: unmodified port (float32) vs oracle (float64) logits: max rel err {port_err_raw:.2e} with "
          f"torch.topk's tie order, {port_err:.2e} with the lowest-index tie-break", flush=True)
    assert port_err < 1e-4, port_err

    meta_common = {
        "config": name,
        "model_seed": str(seed),
        "mtp_weight": str(MTP_WEIGHT),
        "loss": "L = loss_lm + mtp_weight * loss_mtp; grad.<name> = dL/d<name>",
        "loss_lm": "mean CE(logits[:, t], labels[:, t+1]) over t with labels[:, t+1] != -100 (HF convention)",
        "loss_mtp": "mean CE(mtp_logits[:, t], labels[:, t+2]) over t = 0..S-3 with labels[:, t+2] != -100",
        "computed_in": "float64 (stored as F32)",
        "min_router_margin": f"{recorder.router:.6e}",
        "min_indexer_margin": f"{recorder.indexer:.6e}",
        "router_decisions": str(recorder.router_decisions),
        "indexer_decisions": str(recorder.indexer_decisions),
        "indexer_exact_zero_ties": str(recorder.indexer_zero_ties),
        "indexer_tie_break": "exactly equal scores: lower block index first (stable sort)",
        "min_swiglu_clamp_margin": f"{worst_clamp['v']:.6e}",
        "min_indexer_zero_block_relu_margin": f"{recorder.zero_relu:.6e}",
        "margin_definition": "(k-th - (k+1)-th score) / max |finite score| of the row",
        "port_fp32_vs_oracle_max_rel_logit_err": f"{port_err:.3e} (port with lowest-index tie-break)",
        "port_fp32_vs_oracle_max_rel_logit_err_torch_topk_ties": f"{port_err_raw:.3e}",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "aux_loss": "none (output_router_logits=False, no balance loss)",
    }
    summary = {"config": name, "seed": seed, "cases": {}}
    for seq in seqs:
        ids, labels, masked = inputs[seq]
        logits, loss_lm, loss_mtp, grads = results[seq]
        record = {
            "input_ids": ids.to(torch.int64).contiguous(),
            "labels": labels.to(torch.int64).contiguous(),
            "logits": logits.float().contiguous(),
            "loss_lm": loss_lm.reshape(1).float(),
            "loss_mtp": loss_mtp.reshape(1).float(),
        }
        for n, g in grads.items():
            record["grad." + n] = g.float().contiguous()
        meta = dict(meta_common, seq_len=str(seq), batch=str(BATCH), labels_masked=str(masked).lower(),
                    loss_lm_f64=repr(loss_lm.item()), loss_mtp_f64=repr(loss_mtp.item()))
        save_file(record, out_dir / f"case_S{seq}.safetensors", metadata=meta)
        zero_grads = sorted(n for n, g in grads.items() if not g.abs().max() > 0)
        summary["cases"][seq] = {"loss_lm": loss_lm.item(), "loss_mtp": loss_mtp.item(), "masked": masked,
                                 "zero_grad_params": zero_grads}
        print(f"{name} S={seq}: loss_lm {loss_lm.item():.6f} loss_mtp {loss_mtp.item():.6f} "
              f"zero-grad params: {len(zero_grads)} {zero_grads}", flush=True)

    bad = check_released_loading(released_dir, model_dir, save_model)
    print(f"{name}: released-scheme copy loaded through transformers' conversion: "
          f"{'all tensors equal' if not bad else 'MISMATCH ' + str(bad)}", flush=True)
    summary.update({k: meta_common[k] for k in ("min_router_margin", "min_indexer_margin", "indexer_decisions",
                                                 "indexer_exact_zero_ties", "router_decisions",
                                                 "min_swiglu_clamp_margin",
                                                 "min_indexer_zero_block_relu_margin",
                                                 "port_fp32_vs_oracle_max_rel_logit_err",
                                                 "port_fp32_vs_oracle_max_rel_logit_err_torch_topk_ties")})
    summary["released_conversion_check"] = "ok" if not bad else bad
    with open(out_dir / "summary.json", "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    return summary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/v4"))
    parser.add_argument("--config", action="append", help="only this config (repeatable)")
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    out_root = pathlib.Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    for name in args.config or list(RELEASED_CONFIGS):
        generate(name, out_root)


if __name__ == "__main__":
    main()
