"""What torch.compile runs around the norms: the calls of inductor's generated wrapper (fused
kernels, extern matmuls and attention, cake_rmsnorm's ops) in the forward and backward graphs of
a tiny transformers model, unpatched and patched, with the count of each. Runs on the CPU (the
graph's structure, not its speed: which neighbours inductor fuses into its own norm kernels and
which stay separate beside ours). Optionally under autocast(bfloat16) with FP32 parameters (AMP).

    python lab/compiled_graph_kernels.py --model qwen3 --amp 1
"""

import argparse
import collections
import re

import torch
from torch._inductor.utils import run_and_get_code

import cake_rmsnorm as cr

CALL = re.compile(r"^\s*(?:\w+ = )?((?:cpp|triton)_\w+|extern_kernels\.\w+|cake_rmsnorm\._lowering\.\w+|"
                  r"torch\.ops\.aten\.\w+)", re.M)


def build(model, hidden, heads, kv_heads, patched):
    import transformers
    cfg_name = {"llama": "LlamaConfig", "qwen3": "Qwen3Config"}[model]
    cls_name = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model]
    cfg = getattr(transformers, cfg_name)(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                                          num_hidden_layers=1, num_attention_heads=heads,
                                          num_key_value_heads=kv_heads, head_dim=hidden // heads,
                                          max_position_embeddings=512)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    m = getattr(transformers, cls_name)(cfg).float()
    if patched:
        cr.patch(m)
    return m


def graph_calls(model, amp, tokens):
    torch._dynamo.reset()
    f = torch.compile(model)
    ids = torch.randint(0, 512, (1, tokens), generator=torch.Generator().manual_seed(0))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = f(input_ids=ids, labels=ids).loss
        loss.backward()

    _, codes = run_and_get_code(step)
    out = []
    for code in codes:  # the forward graph, then the backward
        body = code[code.index("def call("):]
        out.append([re.sub(r"_\d+$", "", name) for name in CALL.findall(body)])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3", choices=("llama", "qwen3"))
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--amp", type=int, default=1, choices=(0, 1))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    for patched in (False, True):
        model = build(a.model, a.hidden, a.heads, a.kv_heads, patched)
        graphs = graph_calls(model, a.amp == 1, a.tokens)
        print(f"## {'patched' if patched else 'unpatched'} ({a.model}, one layer, amp {a.amp})")
        for label, calls in zip(("forward", "backward"), graphs):
            counts = collections.Counter(c if not c.startswith(("cpp_", "triton_")) else "fused kernel" for c in calls)
            print(f"{label}: {len(calls)} calls: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
            print("  " + " -> ".join(calls))


if __name__ == "__main__":
    main()
