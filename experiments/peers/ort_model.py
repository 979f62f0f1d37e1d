#!/usr/bin/python3
"""A LLaMA-shaped decoder in ONNX with 4-bit weights, for ONNX Runtime's profiler (Table 7).

The shapes of a model card (hidden size, layers, heads, KV heads, FFN size, vocabulary)
with random weights: 4-bit block-quantised MatMuls (com.microsoft MatMulNBits, block 32,
as q4_0), RMS norms (SimplifiedLayerNormalization), grouped-query attention over a past
KV cache given as inputs, SwiGLU FFN, LM head. Input: hidden states of S new tokens
(the embedding lookup is left out), past_key_i/past_value_i [1, kv_heads, P, head_dim].
Left out, as they do not change what the profiler costs per operator: RoPE, the causal
mask, the present KV outputs. Needs Debian's python3-onnx (run with /usr/bin/python3).

  ort_model.py --card models/cards/llama3.2-1b.toml -o model.onnx [--layers N] [--tiny]
"""
import argparse, sys, tomllib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 32


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--card", required=True)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--layers", type=int, help="fewer layers than the card (quick runs)")
    p.add_argument("--tiny", action="store_true", help="the card's [tiny] test variant")
    a = p.parse_args()
    with open(a.card, "rb") as f:
        card = tomllib.load(f)
    if a.tiny:
        card.update(card["tiny"])
    hidden, heads, kv_heads, hd = card["hidden"], card["heads"], card["kv_heads"], card["head_dim"]
    ffn, vocab = card["ffn"], card["vocab"]
    layers = a.layers or card["layers"]
    rng = np.random.default_rng(1)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", hidden])]

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, out, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, domain=domain, **attrs))
        return out

    def linear(x, k, n, name):  # 4-bit weights [n, k/32 blocks, 16 bytes] and one scale per block
        blocks = k // BLOCK
        b = const(name + ".qweight", rng.integers(0, 256, size=(n, blocks, BLOCK // 2), dtype=np.uint8))
        s = const(name + ".scales", (rng.random(n * blocks, dtype=np.float32) * 0.02).astype(np.float32))
        return node("MatMulNBits", [x, b, s], name, domain="com.microsoft", K=k, N=n, bits=4, block_size=BLOCK)

    def rms_norm(x, name):
        w = const(name + ".weight", np.ones(hidden, dtype=np.float32))
        return node("SimplifiedLayerNormalization", [x, w], name, axis=-1, epsilon=1e-5)

    shape_heads = const("shape_q", np.array([1, -1, heads, hd], dtype=np.int64))
    shape_kv = const("shape_kv", np.array([1, -1, kv_heads, hd], dtype=np.int64))
    shape_kv5 = const("shape_kv5", np.array([1, kv_heads, 1, -1, hd], dtype=np.int64))
    expand_kv = const("expand_kv", np.array([1, kv_heads, heads // kv_heads, 1, hd], dtype=np.int64))
    shape_rep = const("shape_rep", np.array([1, heads, -1, hd], dtype=np.int64))
    shape_out = const("shape_out", np.array([1, -1, heads * hd], dtype=np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    x = "x"
    for i in range(layers):
        pre = f"blk.{i}"
        inputs += [helper.make_tensor_value_info(f"past_key_{i}", TensorProto.FLOAT, [1, kv_heads, "P", hd]),
                   helper.make_tensor_value_info(f"past_value_{i}", TensorProto.FLOAT, [1, kv_heads, "P", hd])]
        n = rms_norm(x, f"{pre}.attn_norm")
        q = node("Transpose", [node("Reshape", [linear(n, hidden, heads * hd, f"{pre}.attn_q"), shape_heads], f"{pre}.q4")],
                 f"{pre}.qt", perm=[0, 2, 1, 3])

        def kv(kind, past):
            t = node("Transpose", [node("Reshape", [linear(n, hidden, kv_heads * hd, f"{pre}.attn_{kind}"), shape_kv],
                                        f"{pre}.{kind}4")], f"{pre}.{kind}t", perm=[0, 2, 1, 3])
            cat = node("Concat", [past, t], f"{pre}.{kind}cat", axis=2)
            rep = node("Expand", [node("Reshape", [cat, shape_kv5], f"{pre}.{kind}5"), expand_kv], f"{pre}.{kind}rep")
            return node("Reshape", [rep, shape_rep], f"{pre}.{kind}all")

        k = kv("k", f"past_key_{i}")
        v = kv("v", f"past_value_{i}")
        kq = node("Mul", [node("MatMul", [q, node("Transpose", [k], f"{pre}.kT", perm=[0, 1, 3, 2])], f"{pre}.kq"), scale],
                  f"{pre}.kq_scaled")
        kqv = node("MatMul", [node("Softmax", [kq], f"{pre}.kq_soft_max", axis=-1), v], f"{pre}.kqv")
        merged = node("Reshape", [node("Transpose", [kqv], f"{pre}.kqv_t", perm=[0, 2, 1, 3]), shape_out], f"{pre}.kqv_out")
        x = node("Add", [x, linear(merged, heads * hd, hidden, f"{pre}.attn_output")], f"{pre}.attn_res")
        n = rms_norm(x, f"{pre}.ffn_norm")
        gate = linear(n, hidden, ffn, f"{pre}.ffn_gate")
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{pre}.ffn_sigmoid")], f"{pre}.ffn_silu")
        act = node("Mul", [silu, linear(n, hidden, ffn, f"{pre}.ffn_up")], f"{pre}.ffn_swiglu")
        x = node("Add", [x, linear(act, ffn, hidden, f"{pre}.ffn_down")], f"{pre}.ffn_res")
    logits = linear(rms_norm(x, "output_norm"), hidden, vocab, "output")
    graph = helper.make_graph(nodes, card.get("name", "llama"), inputs,
                              [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, "S", vocab])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, a.output)
    print(f"{a.output}: {layers} layers, hidden {hidden}, {len(nodes)} nodes", file=sys.stderr)


if __name__ == "__main__":
    main()
