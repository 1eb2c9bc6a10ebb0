"""Builds tests/fixtures/grpo/objective.json: the PyTorch oracle for src/trex/rl/objective.hpp.

The GRPO objective written in torch float64 from its definition, not from the C++:

  advantages   rewards viewed as [P, G]; A = (R - mean) / (std + eps) with the population std
               (correction=0), or R - mean (Dr. GRPO); a group whose rewards are all equal -> 0.
  objective    r = exp(lp - lp_old); pg = -minimum(r A, clamp(r, 1 - clip_low, 1 + clip_high) A);
               kl = exp(d) - d - 1 with d = lp_ref - lp; loss = mean over tokens of pg + kl_coef kl.
               The gradient d loss / d lp comes from autograd (not written by hand here); a token
               counts as clipped when A != 0 and autograd gives the pg term zero gradient there.

At an exact tie inside min() (r == 1 + clip_high or 1 - clip_low with A != 0) the derivative does
not exist and autograd picks a subgradient: minimum() gives each branch half, and since torch 2.14
a clamp with scalar bounds passes no gradient at the bound itself, so torch >= 2.14 gives half of
-A r there (torch <= 2.13 gave all of it). The C++ objective counts a boundary token as unclipped
(the full -A r). Each case lists its tie tokens and the fraction autograd gave (tie_pg_grad_factor),
so the C++ test checks those tokens against the convention rather than against the subgradient.

Each case stores its inputs (rewards, group size, sequence lengths, log-probabilities rounded to
6 decimals so they are short and exact in JSON) and the oracle's outputs. Deterministic (fixed
seed, CPU). Usage:

  reference/.venv/bin/python reference/make_grpo_fixtures.py
"""

import json
import math
import pathlib

import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/grpo/objective.json"
SEED = 20261207
F64 = torch.float64


def group_advantages(rewards, group_size, scale_by_std, epsilon):
    R = torch.tensor(rewards, dtype=F64).reshape(-1, group_size)
    mean = R.mean(dim=1, keepdim=True)
    std = R.std(dim=1, keepdim=True, correction=0)
    centered = R - mean
    A = centered / (std + epsilon) if scale_by_std else centered
    uniform = (R == R[:, :1]).all(dim=1, keepdim=True)
    A = torch.where(uniform, torch.zeros_like(A), A)
    return {
        "advantages": A.reshape(-1).tolist(),
        "groups": R.shape[0],
        "uniform_groups": int(uniform.sum()),
        "mean_reward": float(R.mean()),
        "mean_group_std": float(std.mean()),
    }


def objective(lp, lp_old, lp_ref, adv, clip_low, clip_high, kl_coef):
    lp = lp.clone().requires_grad_(True)
    ratio = torch.exp(lp - lp_old)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    pg = -torch.minimum(unclipped, clipped)
    if lp_ref is not None:
        d = lp_ref - lp
        kl = torch.exp(d) - d - 1.0
    else:
        kl = torch.zeros_like(pg)
    per_token = pg + kl_coef * kl if kl_coef > 0 else pg
    loss = per_token.mean()
    (grad_pg,) = torch.autograd.grad(pg.sum(), lp, retain_graph=True)
    (grad,) = torch.autograd.grad(loss, lp)
    clipped_mask = (adv != 0) & (grad_pg == 0)
    # The same mask from the definition; they must agree (ties at r == 1 +- clip are unclipped).
    by_definition = ((adv > 0) & (ratio > 1 + clip_high)) | ((adv < 0) & (ratio < 1 - clip_low))
    assert torch.equal(clipped_mask, by_definition.detach()), "autograd and definition disagree"
    return {
        "loss": float(loss.detach()),
        "pg_loss": float(pg.detach().mean()),
        "kl": float(kl.detach().mean()),
        "clip_fraction": float(clipped_mask.to(F64).mean()),
        "ratio_mean": float(ratio.detach().mean()),
        "ratio_max": float(ratio.detach().max()),
        "tokens": lp.numel(),
        "grad_logprobs": grad.tolist(),
    }, ratio.detach(), grad_pg


def rounded(x):
    return torch.round(x * 1e6) / 1e6


def min_boundary_margin(ratio, clip_low, clip_high):
    low = (ratio - (1 - clip_low)).abs()
    high = (ratio - (1 + clip_high)).abs()
    return float(torch.minimum(low, high).min())


def make_case(name, gen, rewards, group_size, *, scale_by_std=True, epsilon=1e-6, clip_low=0.2,
              clip_high=0.2, kl_coef=0.0, with_ref=None, spread=0.35, max_len=5):
    """Random case: sequence lengths in [1, max_len], lp in [-3, -0.05], lp_old = lp + noise."""
    adv = group_advantages(rewards, group_size, scale_by_std, epsilon)
    lengths = torch.randint(1, max_len + 1, (len(rewards),), generator=gen).tolist()
    n = sum(lengths)
    lp = rounded(-(0.05 + 2.95 * torch.rand(n, generator=gen, dtype=F64)))
    lp_old = rounded(lp + spread * torch.randn(n, generator=gen, dtype=F64))
    with_ref = kl_coef > 0 if with_ref is None else with_ref
    lp_ref = rounded(lp + 0.3 * torch.randn(n, generator=gen, dtype=F64)) if with_ref else None
    return finish_case(name, rewards, group_size, scale_by_std, epsilon, lengths, adv, lp, lp_old,
                       lp_ref, clip_low, clip_high, kl_coef, require_margin=True)


def finish_case(name, rewards, group_size, scale_by_std, epsilon, lengths, adv, lp, lp_old, lp_ref,
                clip_low, clip_high, kl_coef, require_margin):
    token_adv = torch.repeat_interleave(torch.tensor(adv["advantages"], dtype=F64),
                                        torch.tensor(lengths))
    result, ratio, grad_pg = objective(lp, lp_old, lp_ref, token_adv, clip_low, clip_high, kl_coef)
    margin = min_boundary_margin(ratio, clip_low, clip_high)
    if require_margin:
        # Random ratios must not sit within rounding of a clip boundary, or the C++ exp could
        # classify a token differently; the exact ties are built on purpose in "boundaries".
        assert margin > 1e-6, f"{name}: a ratio is within {margin} of a clip boundary"
    # Exact ties inside min() (r == 1 + clip_high or 1 - clip_low, A != 0): the derivative does
    # not exist there, and autograd picks a subgradient. Record which fraction of the unclipped
    # pg gradient -A r it gave, so the C++ test can tell a convention from an error.
    ties = (token_adv != 0) & ((ratio == 1 + clip_high) | (ratio == 1 - clip_low))
    factors = sorted(set((grad_pg[ties] / (-token_adv[ties] * ratio[ties])).tolist()))
    assert len(factors) <= 1, f"{name}: autograd splits ties unevenly: {factors}"
    clipped = result["clip_fraction"] * result["tokens"]
    above = int((ratio > 1 + clip_high).sum())
    below = int((ratio < 1 - clip_low).sum())
    print(f"{name:18s} N={result['tokens']:3d} uniform={adv['uniform_groups']} "
          f"r in [{float(ratio.min()):.3f}, {float(ratio.max()):.3f}] above={above} below={below} "
          f"clipped={clipped:.0f} margin={margin:.2e} loss={result['loss']:+.6f} "
          f"kl={result['kl']:.6f}")
    if factors:
        print(f"  {int(ties.sum())} tokens on a clip boundary with A != 0: autograd's pg gradient "
              f"there is {factors[0]} x (-A r)")
    case = {
        "name": name,
        "rewards": rewards,
        "group_size": group_size,
        "scale_by_std": scale_by_std,
        "epsilon": epsilon,
        "clip_low": clip_low,
        "clip_high": clip_high,
        "kl_coef": kl_coef,
        "sequence_lengths": lengths,
        "logprobs": lp.tolist(),
        "old_logprobs": lp_old.tolist(),
        "ref_logprobs": lp_ref.tolist() if lp_ref is not None else [],
        "token_advantages": token_adv.tolist(),
    }
    case.update(adv)
    case.update(result)
    case["tie_tokens"] = torch.nonzero(ties).reshape(-1).tolist()
    case["tie_pg_grad_factor"] = factors[0] if factors else None
    return case, ratio, token_adv, grad_pg


def boundaries_case():
    """Ratios exactly on the clip boundaries (ties inside min()), just outside them, and A == 0.

    clip_low 0.5 and clip_high 1.0 put the boundaries at r = 0.5 and r = 2, which exp reaches
    exactly from log-ratios of -ln 2 and ln 2 (as doubles, exp rounds to 0.5 and 2.0); the
    log-probabilities are chosen so that lp - lp_old is exactly +-ln 2 (0 - (-ln2), -2ln2 - (-ln2)).
    """
    ln2 = math.log(2.0)
    # (lp, lp_old): r = 2 (tie), r = 0.5 (tie), r = 1, just above 2, just below 0.5, inside both.
    pairs = [(0.0, -ln2), (-2 * ln2, -ln2), (-ln2, 0.0), (-1.5, -1.5), (0.0, -0.7), (-0.7, 0.0),
             (-0.69, 0.0), (-0.3, -0.9)]
    rewards = [1.0, 0.0, 0.5, 0.5]  # group 1: A = +-(0.5 / (0.5 + eps)); group 2 uniform: A = 0
    adv = group_advantages(rewards, 2, True, 1e-6)
    lengths = [len(pairs), len(pairs), 3, 2]
    lp, lp_old = [], []
    for _ in range(2):
        lp += [p[0] for p in pairs]
        lp_old += [p[1] for p in pairs]
    lp += [-0.4, -2.0, -1.0, -0.1, -0.2]
    lp_old += [-0.4 - ln2, -1.0, -1.0, 0.0, -0.9]
    lp = torch.tensor(lp, dtype=F64)
    lp_old = torch.tensor(lp_old, dtype=F64)
    lp_ref = lp.clone()  # d = 0 on most tokens: kl 0 and no kl gradient, exactly
    lp_ref[1::3] += 0.25
    case, ratio, token_adv, grad_pg = finish_case(
        "boundaries", rewards, 2, True, 1e-6, lengths, adv, lp, lp_old, lp_ref, 0.5, 1.0, 0.1,
        require_margin=False)
    assert len(case["tie_tokens"]) >= 4, "exp(+-ln 2) did not land exactly on 2 and 0.5"
    return case


def zero_clip_case():
    """clip_low = clip_high = 0: r == 1 exactly (lp == lp_old) sits on both boundaries at once."""
    rewards = [2.0, 0.0, 1.0, 3.0, 1.0, 1.0]
    adv = group_advantages(rewards, 3, True, 1e-6)
    lengths = [2, 2, 2, 2, 2, 2]
    lp = torch.tensor([-1.0, -0.5, -1.0, -0.5, -1.0, -0.5, -1.0, -0.5, -1.0, -0.5, -1.0, -0.5],
                      dtype=F64)
    # r == 1 for the first token of each sequence, just above or below 1 for the second.
    lp_old = lp.clone()
    lp_old[1::4] += 1e-6
    lp_old[3::4] -= 1e-6
    case, ratio, token_adv, grad_pg = finish_case(
        "zero_clip", rewards, 3, True, 1e-6, lengths, adv, lp, lp_old, None, 0.0, 0.0, 0.0,
        require_margin=False)
    assert len(case["tie_tokens"]) == 5  # the sequence with A == 0 has none
    return case


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    cases = []
    binary = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    graded = [0.1, 0.7, 0.4, 1.0, 0.0, 0.25, 0.5, 0.5, 0.9, 0.3, 0.3, 0.6]
    cases.append(make_case("pg_only", gen, binary, 4)[0])
    cases.append(make_case("kl_on", gen, graded, 4, kl_coef=0.1)[0])
    cases.append(make_case("clip_higher", gen, graded, 3, clip_high=0.28, kl_coef=0.04)[0])
    cases.append(make_case("uniform_groups", gen,
                           [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.7, 0.7, 0.7, 0.0, 1.0, 0.5], 3,
                           kl_coef=0.02, spread=0.5, max_len=8)[0])
    cases.append(make_case("dr_grpo", gen, graded, 4, scale_by_std=False, spread=0.5)[0])
    cases.append(make_case("kl_reported_only", gen, [0.0, 1.0, 0.8, 0.2], 2, with_ref=True)[0])
    cases.append(boundaries_case())
    cases.append(zero_clip_case())

    lines = ["{", f' "generator": "reference/make_grpo_fixtures.py",',
             f' "torch": {json.dumps(torch.__version__)},', f' "seed": {SEED},', ' "cases": [']
    for i, case in enumerate(cases):
        body = ",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in case.items())
        lines.append("  {\n" + body + "\n  }" + ("," if i + 1 < len(cases) else ""))
    lines += [" ]", "}"]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
