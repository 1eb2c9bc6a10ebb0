"""A float64 copy of the transformers DeepSeek-V4 port, for the parity oracle.

The port hard-codes float32 in its RMSNorms, RoPE, mHC, HC head, compressor/indexer softmax and
indexer scorer (see docs/deepseek-v4-hf-port.md, difference D5). Those casts are precision choices
for BF16 inference, not semantics, but they would cap a "float64" oracle at float32 accuracy. This
module loads the port's source, replaces each hard-coded float32 by ORACLE_DTYPE (asserting how
many replacements were made, so a changed upstream file fails loudly), and executes it as a sibling
module of the original. Parameter names, initialisation and forward logic are untouched.

It also recomputes the RoPE inverse frequencies in float64 from spec §2.8 (YaRN ramp), since the
port builds them in float32, and checks them against the port's own values.
"""

import importlib.util
import math
import pathlib
import sys

import torch

import transformers.models.deepseek_v4.modeling_deepseek_v4 as port

ORACLE_DTYPE = torch.float64

# (pattern, replacement, expected count) for transformers 5.24.0
_REPLACEMENTS = [
    (".float()", ".to(ORACLE_DTYPE)", 15),
    ("torch.float32", "ORACLE_DTYPE", 25),
    ("dtype=torch.float)", "dtype=ORACLE_DTYPE)", 2),
    # Indexer top-k: deterministic tie-break (lowest block index first among exactly equal scores).
    # Exact ties are common: a block whose ReLU terms are all zero scores exactly 0, and a query
    # whose head weights are all negative ranks those zero blocks first. torch.topk leaves the
    # order of ties undefined; T-Rex must use the same rule (docs/deepseek-v4-hf-port.md D11).
    ("index_scores.topk(top_k, dim=-1).indices",
     "index_scores.sort(dim=-1, descending=True, stable=True).indices[..., :top_k]", 2),
]


def _load_patched():
    name = "transformers.models.deepseek_v4.modeling_deepseek_v4_oracle"
    if name in sys.modules:
        return sys.modules[name]
    src = pathlib.Path(port.__file__).read_text()
    for old, new, expected in _REPLACEMENTS:
        count = src.count(old)
        if count != expected:
            raise RuntimeError(
                f"oracle_port: expected {expected} occurrences of {old!r} in {port.__file__}, found {count}; "
                "the port changed, re-audit docs/deepseek-v4-hf-port.md §3"
            )
        src = src.replace(old, new)
    src = "ORACLE_DTYPE = __import__('torch').float64\n" + src
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "transformers.models.deepseek_v4"
    module.__file__ = port.__file__ + " (oracle float64 copy)"
    sys.modules[name] = module
    exec(compile(src, module.__file__, "exec"), module.__dict__)
    return module


oracle = _load_patched()


def spec_inv_freq(base: float, rope_dim: int, yarn: dict | None) -> torch.Tensor:
    """theta_p (p = 0..rope_dim/2-1) per spec §2.8, float64; YaRN ramp if `yarn` is given."""
    p = torch.arange(rope_dim // 2, dtype=torch.float64)
    theta = base ** (-2.0 * p / rope_dim)
    if yarn is None:
        return theta
    factor = float(yarn["factor"])
    orig = float(yarn["original_max_position_embeddings"])

    def corr(rot):
        return rope_dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr(float(yarn["beta_fast"]))), 0)
    hi = min(math.ceil(corr(float(yarn["beta_slow"]))), rope_dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((p - lo) / (hi - lo)).clamp(0, 1)
    return theta / factor * ramp + theta * (1 - ramp)


def set_float64_rope(model: torch.nn.Module, config) -> None:
    """Overwrite every rotary table of `model` with float64 spec values (checked against the port)."""
    for module in model.modules():
        if not isinstance(module, oracle.DeepseekV4RotaryEmbedding):
            continue
        for layer_type in module.layer_types:
            params = config.rope_parameters[layer_type]
            rope_dim = int(config.head_dim * params["partial_rotary_factor"])
            yarn = params if params["rope_type"] == "yarn" else None
            if yarn is not None:
                assert float(params.get("attention_factor", 0.0)) == 1.0, "YaRN mscale must be off"
            theta = spec_inv_freq(float(params["rope_theta"]), rope_dim, yarn)
            current = getattr(module, f"{layer_type}_inv_freq")
            err = (current.double().cpu() - theta).abs().max().item()
            assert err < 1e-6 * max(1.0, theta.abs().max().item()), (layer_type, err)
            setattr(module, f"{layer_type}_inv_freq", theta.to(current.device))
            setattr(module, f"{layer_type}_original_inv_freq", theta.clone())
            assert getattr(module, f"{layer_type}_attention_scaling") == 1.0
