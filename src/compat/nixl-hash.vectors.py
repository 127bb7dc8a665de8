#!/usr/bin/env python3
"""Test vectors for kvgate's prediction of vLLM's NIXL compatibility hash (src/compat/nixl-hash.ts).

Regenerate with:

    python3 src/compat/nixl-hash.vectors.py > src/compat/nixl-hash.vectors.json

The factor dicts are built the way vLLM builds them (docs/vllm-disaggregation.md section 3), from stand-in
config objects shaped like vLLM's (no torch or vLLM needed):

- v2 (single-file connector @ 002a1057): the base set.
- v2 after PR #33339 ("Enable Cross layers KV cache layout at NIXL Connector V2", vLLM 0.16 on): the base set plus
  cross_layers_blocks, passed in by the caller, with no connector version bump.
- v2 in the split nixl/ package (nixl/metadata.py and nixl/utils.py @ fe6adf39, NIXL_CONNECTOR_VERSION still 2):
  is_hma_enabled joins as well, again without a bump; the first release is taken as 0.18 (HMA support for
  NixlConnector, PR #35758, opened 2026-03-02 and merged before 2026-04-08), not read from a release tag.
- v4 (interpolated from the version history; same dict as the split v2): base + cross_layers_blocks + is_hma_enabled.
- v12 (nixl/metadata.py @ 02cfb534): v4 minus cross_layers_blocks, plus speculative_config and transfer_mode.
- v13 (nixl/metadata.py @ 73ee90a0): the v12 dict unchanged (only the agent metadata gained packed-member layouts).

The hash is vLLM's `hash_factors()`: sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest().
Each vector also carries the kvgate descriptor describing the same worker, so the TypeScript test can check
that `predictNixlHash(descriptor)` gives byte-identical factors JSON and hash. `json_dumps` holds extra values
(floats, unicode keys) with Python's own `json.dumps` output, to pin the emulation beyond what factors contain.
Integral floats (1e16, 2.0) are left out on purpose: JavaScript has one number type, so kvgate writes every
integral value as a Python int, which is what factor dicts hold.
"""
import hashlib
import json
import sys
from types import SimpleNamespace


class TorchDtype:
    """Stands in for torch.dtype: str(torch.bfloat16) == 'torch.bfloat16'."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


# vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE (the --dtype spellings vLLM accepts).
STR_DTYPE_TO_TORCH_DTYPE = {
    "half": TorchDtype("float16"),
    "float16": TorchDtype("float16"),
    "float": TorchDtype("float32"),
    "float32": TorchDtype("float32"),
    "bfloat16": TorchDtype("bfloat16"),
}


class ModelConfig:
    def __init__(self, model, dtype, num_kv_heads, head_size, num_layers):
        self.model = model
        self.dtype = STR_DTYPE_TO_TORCH_DTYPE[dtype]
        self._kv, self._head, self._layers = num_kv_heads, head_size, num_layers

    def get_total_num_kv_heads(self):
        return self._kv

    def get_head_size(self):
        return self._head

    def get_total_num_hidden_layers(self):
        return self._layers


def hash_factors(items):
    """vllm/config/utils.py hash_factors()."""
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def base_factors(vllm_config, attn_backend_name, connector_version):
    model_config = vllm_config.model_config
    cache_config = vllm_config.cache_config
    return {
        "vllm_version": vllm_config.vllm_version,
        "nixl_connector_version": connector_version,
        "model": model_config.model,
        "dtype": str(model_config.dtype),
        "num_kv_heads": model_config.get_total_num_kv_heads(),
        "head_size": model_config.get_head_size(),
        "num_hidden_layers": model_config.get_total_num_hidden_layers(),
        "attn_backend_name": attn_backend_name,
        "cache_dtype": str(cache_config.cache_dtype),
    }


def speculative_factor(vllm_config):
    """EAGLE/MTP draft configuration (PR #49230); None when speculative decoding is off."""
    spec = vllm_config.speculative_config
    if spec is None:
        return None
    draft_kv = spec.kv_cache_dtype
    if draft_kv == "auto":
        draft_kv = str(vllm_config.cache_config.cache_dtype)
    return {
        "method": spec.method,
        "model": spec.model,
        "revision": spec.revision,
        "code_revision": spec.code_revision,
        "parallel_drafting": spec.parallel_drafting,
        "kv_cache_dtype": draft_kv,
        "auxiliary_layer_ids": spec.auxiliary_layer_ids,
    }


def vllm_minor(version):
    parts = version.split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def resolve_disable_hma(vllm_version, disable_hybrid_kv_cache_manager):
    """vllm/config/vllm.py: None (the flag not given) with --kv-transfer-config set. Before PR #41847 vLLM turned HMA
    off for any connector; from it (taken as 0.21) it stays on for SupportsHMA connectors such as NixlConnector."""
    if disable_hybrid_kv_cache_manager is not None:
        return disable_hybrid_kv_cache_manager
    return vllm_minor(vllm_version) < (0, 21)


def compute_nixl_compatibility_hash(vllm_config, attn_backend_name, connector_version, transfer_mode="pull",
                                    cross_layers_blocks=False):
    factors = base_factors(vllm_config, attn_backend_name, connector_version)
    single_file_with_cross_layers = connector_version <= 2 and vllm_minor(vllm_config.vllm_version) >= (0, 16)
    if (connector_version >= 3 and connector_version < 7) or single_file_with_cross_layers:
        factors["cross_layers_blocks"] = cross_layers_blocks
    split_v2_with_hma = connector_version == 2 and vllm_minor(vllm_config.vllm_version) >= (0, 18)
    if connector_version >= 3 or split_v2_with_hma:
        factors["is_hma_enabled"] = not vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
    if connector_version >= 6:
        factors["speculative_config"] = speculative_factor(vllm_config)
    if connector_version >= 7:
        factors["transfer_mode"] = transfer_mode
    return factors, hash_factors(factors)


def worker(name, *, model, model_id, dtype, kv_dtype, scale_scheme="none", version, connector_version,
           backend="FLASH_ATTN", heads=8, head_size=128, layers=32, hma=True, spec=None, transfer_mode="pull",
           block_size=16, layout="HND", cross_layers=False, omit_flags=False):
    """One vector: a vLLM-shaped config, the factors/hash vLLM computes, and the matching kvgate descriptor."""
    vllm_config = SimpleNamespace(
        vllm_version=version,
        model_config=ModelConfig(model, dtype, heads, head_size, layers),
        cache_config=SimpleNamespace(cache_dtype=kv_dtype),
        # omit_flags: the operator passed neither --(no-)disable-hybrid-kv-cache-manager nor enable_cross_layers_blocks.
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=resolve_disable_hma(version, None if omit_flags else not hma)),
        speculative_config=None if spec is None else SimpleNamespace(**spec),
    )
    factors, digest = compute_nixl_compatibility_hash(vllm_config, backend, connector_version, transfer_mode,
                                                      False if omit_flags else cross_layers)
    descriptor = {
        "model": {"id": model_id, "revision": "0123456789abcdef0123456789abcdef01234567", "path": model},
        "adapter": None,
        "tokenizer": {"id": model_id, "revision": "0123456789abcdef0123456789abcdef01234567"},
        "chatTemplate": {"id": model_id + "/chat_template.jinja", "revision": "sha256:00ff"},
        "architecture": {
            "name": "LlamaForCausalLM",
            "numLayers": layers,
            "numKvHeads": heads,
            "headSize": head_size,
            "attentionBackend": backend,
            "position": {"type": "rope", "ropeTheta": 500000},
            "slidingWindow": None,
        },
        "modelDtype": dtype,
        "kvCache": {"dtype": kv_dtype, "scaleScheme": scale_scheme, "blockSize": block_size, "layout": layout},
        "engine": {"name": "vllm", "version": version},
        "connector": {"name": "NixlConnector", "version": connector_version, "transferMode": transfer_mode},
        "hybridKvCacheManager": hma,
        "crossLayersBlocks": cross_layers,
        "speculative": speculative_factor(vllm_config),
        "parallel": {"tensorParallelSize": 1},
    }
    if omit_flags:
        del descriptor["hybridKvCacheManager"]
        del descriptor["crossLayersBlocks"]
    return {
        "name": name,
        "descriptor": descriptor,
        "factors": factors,
        "dumped": json.dumps(factors, sort_keys=True),
        "hash": digest,
    }


EAGLE = {
    "method": "eagle3",
    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "revision": "main",
    "code_revision": None,
    "parallel_drafting": False,
    "kv_cache_dtype": "auto",
    "auxiliary_layer_ids": [2, 16, 29],
}

MTP = {
    "method": "mtp",
    "model": "deepseek-ai/DeepSeek-V3-\u00e9dition",
    "revision": "r\u00e9v-1",
    "code_revision": "c0de",
    "parallel_drafting": True,
    "kv_cache_dtype": "fp8_e5m2",
    "auxiliary_layer_ids": [],
}

VECTORS = [
    worker("v2 base set, hub id, bfloat16", model="meta-llama/Llama-3.1-8B-Instruct",
           model_id="meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16", kv_dtype="auto",
           version="0.11.0", connector_version=2),
    worker("v2 unicode and escapes in the model path", model='/models/Ll\u00e5ma "q" \\x\t\U0001F600/\u00fc\x7f',
           model_id="acme/llama-\u00fc", dtype="half", kv_dtype="auto", version="0.11.1.dev12+gabc",
           connector_version=2, backend="FLASHINFER"),
    worker("v4 fp8 cache dtype, static scales, HMA on", model="Qwen/Qwen3-32B", model_id="Qwen/Qwen3-32B",
           dtype="bfloat16", kv_dtype="fp8", scale_scheme="static-checkpoint", version="0.12.0",
           connector_version=4, heads=8, head_size=128, layers=64),
    worker("v4 float16, HMA off, auto cache dtype", model="/mnt/models/mistral-7b", model_id="mistralai/Mistral-7B-v0.3",
           dtype="float16", kv_dtype="auto", version="0.12.0", connector_version=4, hma=False,
           backend="TRITON_ATTN", block_size=32),
    worker("v12 EAGLE speculative config", model="meta-llama/Llama-3.1-8B-Instruct",
           model_id="meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16", kv_dtype="bfloat16",
           version="0.14.2", connector_version=12, spec=EAGLE),
    worker("v12 push mode, no speculative config", model="meta-llama/Llama-3.1-70B-Instruct",
           model_id="meta-llama/Llama-3.1-70B-Instruct", dtype="bfloat16", kv_dtype="fp8_e4m3",
           scale_scheme="packed", version="0.14.2", connector_version=12, transfer_mode="push", layers=80),
    worker("v12 MTP with unicode draft model and fp8_e5m2", model="deepseek-ai/DeepSeek-V3",
           model_id="deepseek-ai/DeepSeek-V3", dtype="bfloat16", kv_dtype="fp8_e5m2",
           scale_scheme="dynamic-per-block", version="0.14.2", connector_version=12, spec=MTP, heads=1,
           head_size=576, layers=61, backend="FLASHMLA"),
    worker("v12 float32, trailing slash path, HMA off", model="/models/tiny-llama/", model_id="TinyLlama/TinyLlama-1.1B",
           dtype="float", kv_dtype="auto", version="0.14.2rc1", connector_version=12, hma=False, heads=4,
           head_size=64, layers=22, layout="NHD"),
]

VECTORS += [
    worker("v4 non-ASCII hub id (CJK, accents, emoji), cross-layer blocks on", model="\u7ec4\u7ec7/\u6a21\u578b-\u00e9t\u00e9-\U0001F680",
           model_id="\u7ec4\u7ec7/\u6a21\u578b-\u00e9t\u00e9-\U0001F680", dtype="bfloat16", kv_dtype="auto",
           version="0.15.1", connector_version=4, cross_layers=True),
    worker("v4 same worker, cross-layer blocks off", model="\u7ec4\u7ec7/\u6a21\u578b-\u00e9t\u00e9-\U0001F680",
           model_id="\u7ec4\u7ec7/\u6a21\u578b-\u00e9t\u00e9-\U0001F680", dtype="bfloat16", kv_dtype="auto",
           version="0.15.1", connector_version=4, cross_layers=False),
    worker("v2 on vLLM 0.16 (PR #33339), cross-layer blocks on", model="/models/\u0420\u0443\u0441\u0441\u043a\u0438\u0439-7B",
           model_id="acme/\u0440\u0443\u0441-7b", dtype="bfloat16", kv_dtype="auto", version="0.16.0",
           connector_version=2, cross_layers=True),
    worker("v2 on vLLM 0.16 (PR #33339), cross-layer blocks off", model="/models/\u0420\u0443\u0441\u0441\u043a\u0438\u0439-7B",
           model_id="acme/\u0440\u0443\u0441-7b", dtype="bfloat16", kv_dtype="auto", version="0.16.0",
           connector_version=2, cross_layers=False),
    worker("v2 split package on vLLM 0.18, HMA on", model="Qwen/Qwen3-8B", model_id="Qwen/Qwen3-8B",
           dtype="bfloat16", kv_dtype="auto", version="0.18.1", connector_version=2, hma=True),
    worker("v2 split package on vLLM 0.18, HMA off", model="Qwen/Qwen3-8B", model_id="Qwen/Qwen3-8B",
           dtype="bfloat16", kv_dtype="auto", version="0.18.1", connector_version=2, hma=False),
    worker("v4 flags left out on vLLM 0.15 (HMA off with a connector)", model="Qwen/Qwen3-8B", model_id="Qwen/Qwen3-8B",
           dtype="bfloat16", kv_dtype="auto", version="0.15.1", connector_version=4, omit_flags=True),
    worker("v12 flags left out on vLLM 0.21 (HMA on, PR #41847)", model="Qwen/Qwen3-8B", model_id="Qwen/Qwen3-8B",
           dtype="bfloat16", kv_dtype="auto", version="0.21.0", connector_version=12, omit_flags=True),
    worker("v13 flags left out on vLLM 0.22 (nixl/metadata.py @ 73ee90a0)", model="Qwen/Qwen3-8B",
           model_id="Qwen/Qwen3-8B", dtype="bfloat16", kv_dtype="auto", version="0.22.0", connector_version=13,
           omit_flags=True),
    worker("v13 push mode, HMA off", model="/models/llama-3.1-8b", model_id="meta-llama/Llama-3.1-8B-Instruct",
           dtype="bfloat16", kv_dtype="fp8", scale_scheme="static-checkpoint", version="0.22.0", connector_version=13,
           hma=False, transfer_mode="push"),
]

JSON_DUMPS = [
    {"n": 0.1, "small": 1e-05, "edge": 0.0001, "long": 123456789012345.6, "longer": 1234567890123456.8,
     "neg": -2.5e-07, "ints": [0, -7, 10**15], "nested": {"z": None, "a": True, "\u00e9": False}},
    {"\U0001F600": 1, "\uffff": 2, "B": 3, "a": 4, "\u00e9": 5, "": 6},
    ["\u0000\u001f\u2028", "\\\"/", "caf\u00e9 \U0001F600", 3.14, 5e-324, -0.000123],
]


def main():
    out = {
        "generator": "src/compat/nixl-hash.vectors.py",
        "python": sys.version.split()[0],
        "vectors": VECTORS,
        "json_dumps": [{"value": v, "dumped": json.dumps(v, sort_keys=True)} for v in JSON_DUMPS],
    }
    json.dump(out, sys.stdout, indent=2, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
