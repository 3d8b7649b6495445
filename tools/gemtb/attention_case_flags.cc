#include "tools/gemtb/attention_case_flags.h"

namespace gemtb::cli {

void RegisterAttentionCaseFlags(FlagSet& f, io::AttentionCaseSpec& s) {
  f.String("q", &s.q, "queries [TQ,H,Dqk] (.npy: <f8, <f4, <f2, or bfloat16 bits as <u2)");
  f.String("k", &s.k, "keys [TK,Hkv,Dqk], same dtype as q");
  f.String("v", &s.v, "values [TK,Hkv,Dv], same dtype as q");
  f.String("q-offsets", &s.q_offsets, "int64 [nq+1] sequence offsets into q");
  f.String("kv-offsets", &s.kv_offsets, "int64 [nkv+1] sequence offsets into k and v");
  f.OptionalInt64("max-lq", &s.max_lq, "declared max q length (default: the longest)");
  f.OptionalInt64("max-lk", &s.max_lk, "declared max kv length (default: the longest)");
  f.String("act", &s.act,
           "softmax|identity|gelu|gelu_tanh|silu|relu|relu_square|leaky_relu|hardswish");
  f.OptionalDouble("pre-scale", &s.pre_scale, "scale before act (default 1/sqrt(Dqk) softmax, else 1)");
  f.OptionalDouble("post-scale", &s.post_scale, "scale after act (default 1)");
  f.String("mask", &s.mask, "none|causal|window|block");
  f.Int64("window-left", &s.window_left, "window(l, r) left extent, -1 = unbounded");
  f.Int64("window-right", &s.window_right, "window(l, r) right extent, -1 = unbounded");
  f.Int64("block", &s.block, "block(n) size (default 64)");
  f.String("align", &s.align, "bottom_right (default) | top_left");
  f.String("bias-dense", &s.bias_dense, "dense bias [B,Hb,maxLq,maxLk] (fp32/fp64)");
  f.String("bias-rel", &s.bias_rel, "relative-position bias table [Hr,2*maxL-1]");
  f.String("ts", &s.ts, "int64 [TQ] per-token timestamps (time bias, self-attention)");
  f.String("bias-ts", &s.bias_ts, "time-bucket bias table [Ht,129]");
  f.String("rope-q", &s.rope_q, "RoPE table [TQ,Dqk]: sin in [0,D/2), cos in [D/2,D)");
  f.String("rope-k", &s.rope_k, "RoPE table [TK,Dqk]");
  f.String("rope-v", &s.rope_v, "RoPE table [TK,Dv] (optional)");
  f.Bool("broadcast-q", &s.broadcast_q, "one q sequence read by every output sequence (PMA)");
  f.String("kv-index", &s.kv_index, "int64 [B]: output b reads kv sequence kv_index[b]");
  f.String("do", &s.d_o, "dO [TO,H,Dv] for the backward, same dtype as q");
}

}  // namespace gemtb::cli
