// The graph of one pass (clover_step): CloverForBlockDiffusion.step of clover/model/model.py in
// ggml ops, batch 1. `commit` tokens (whole blocks) come first and write the history, then an
// optional `denoise` block that only reads it. Each piece names the PyTorch code it mirrors.
#include "clover_impl.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace {

struct builder {
    ggml_context * ctx;
    const clover_model & m;
    const clover_hparams & h;
    clover_cache & cache;
    const clover_pass & p;
    clover_pass_out & out;
    int64_t T;
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [start, end) of each block of the pass

    // a tensor over host memory the cache owns (read by the graph, never written)
    ggml_tensor * host(float * data, int64_t ne0, int64_t ne1, int64_t ne2 = 1, int64_t ne3 = 1) {
        ggml_tensor * t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, ne0, ne1, ne2, ne3);
        t->data = data;
        return t;
    }

    ggml_tensor * output(ggml_tensor * t) {
        t = ggml_cont(ctx, t);
        ggml_set_output(t);
        return t;
    }

    // layers.py RMSNorm (the weight stored as 1 + w) and GatedRMSNorm's first half
    ggml_tensor * rms(ggml_tensor * x, ggml_tensor * w) { return ggml_mul(ctx, ggml_rms_norm(ctx, x, h.eps), w); }

    // gdn.py l2norm: x · rsqrt(Σx² + 1e-6), as rms_norm(x, 1e-6/d) / √d
    ggml_tensor * l2norm(ggml_tensor * x) {
        float d = (float) x->ne[0];
        return ggml_scale(ctx, ggml_rms_norm(ctx, x, 1e-6f / d), 1.0f / sqrtf(d));
    }

    ggml_tensor * per_head(ggml_tensor * w) { return ggml_reshape_3d(ctx, w, 1, 1, w->ne[0]); }

    ggml_tensor * tokens_of(ggml_tensor * x, int64_t s, int64_t n) {  // tokens [s, s+n) of [a, b, T]
        return ggml_view_3d(ctx, x, x->ne[0], x->ne[1], n, x->nb[1], x->nb[2], s * x->nb[2]);
    }

    ggml_tensor * attention(int il, ggml_tensor * x);
    ggml_tensor * gdn(int il, ggml_tensor * x);
    ggml_tensor * conv(const clover_layer & L, ggml_tensor * xx);
    void heads(ggml_tensor * feat, ggml_tensor ** q, ggml_tensor ** k, ggml_tensor ** v);
    std::vector<ggml_tensor *> history(int il, ggml_tensor * x, ggml_tensor * cc, ggml_tensor * g, ggml_tensor * beta);
    ggml_tensor * mix(const clover_layer & L, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * S, int64_t n);
    ggml_tensor * ffn(int il, ggml_tensor * x);
    ggml_tensor * moe(const clover_layer & L, ggml_tensor * x);
};

// attention.py Attention.forward_step: q (with its output gate) and k RMS-normed, partial NeoX
// RoPE, grouped K/V over the history and the new tokens, block-causal mask, sigmoid gate, o_proj
ggml_tensor * builder::attention(int il, ggml_tensor * x) {
    const clover_layer & L = m.layers[il];
    int64_t D = h.head_dim, nh = h.n_head, nkv = h.n_head_kv, Lh = p.length;
    ggml_tensor * qg = ggml_mul_mat(ctx, L.wq, x);  // [2D·nh, T]: per head D query values, then D gate values
    ggml_tensor * q = ggml_view_3d(ctx, qg, D, nh, T, 2 * D * sizeof(float), qg->nb[1], 0);
    ggml_tensor * gate = ggml_view_3d(ctx, qg, D, nh, T, 2 * D * sizeof(float), qg->nb[1], D * sizeof(float));
    q = rms(ggml_cont(ctx, q), L.q_norm);
    ggml_tensor * k = rms(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, x), D, nkv, T), L.k_norm);
    ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wv, x), D, nkv, T);
    q = ggml_rope_ext(ctx, q, out.pos, nullptr, h.rope_dims, GGML_ROPE_TYPE_NEOX, 0, h.rope_base, 1.0f, 0.0f, 1.0f,
                      0.0f, 0.0f);
    k = ggml_rope_ext(ctx, k, out.pos, nullptr, h.rope_dims, GGML_ROPE_TYPE_NEOX, 0, h.rope_base, 1.0f, 0.0f, 1.0f,
                      0.0f, 0.0f);
    if (p.n_commit) {  // the committed tokens' keys and values become history
        out.k[il] = output(tokens_of(k, 0, p.n_commit));
        out.v[il] = output(tokens_of(v, 0, p.n_commit));
    }
    ggml_tensor *K = k, *V = v;
    if (Lh) {
        clover_layer_cache & lc = cache.layers[il];
        K = ggml_concat(ctx, host(lc.k.data(), D, nkv, Lh), k, 2);
        V = ggml_concat(ctx, host(lc.v.data(), D, nkv, Lh), v, 2);
    }
    ggml_tensor * kq = ggml_mul_mat(ctx, ggml_permute(ctx, K, 0, 2, 1, 3), ggml_permute(ctx, q, 0, 2, 1, 3));
    kq = ggml_soft_max_ext(ctx, kq, out.kq_mask, 1.0f / sqrtf((float) D), 0.0f);  // [Lh+T, T, nh]
    ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, V, 1, 2, 0, 3));        // [Lh+T, D, nkv]
    ggml_tensor * o = ggml_mul_mat(ctx, vt, kq);                               // [D, T, nh]
    o = ggml_reshape_2d(ctx, ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3)), D * nh, T);
    o = ggml_mul(ctx, o, ggml_sigmoid(ctx, ggml_reshape_2d(ctx, ggml_cont(ctx, gate), D * nh, T)));
    return ggml_mul_mat(ctx, L.wo, o);
}

// ops/conv.py causal_conv over xx = [tail; u] (tap j reads position i-(K-1-j)); right_conv
// (tap d reads i+d inside i's block, right_conv below) when the model has it. Returns the causal
// features [C, T] before the activation.
ggml_tensor * builder::conv(const clover_layer & L, ggml_tensor * xx) {
    int64_t C = h.conv_dim(), K = h.conv_k;
    ggml_tensor * cc = nullptr;
    for (int64_t j = 0; j < K; j++) {
        ggml_tensor * tap = ggml_view_2d(ctx, xx, C, T, xx->nb[1], j * xx->nb[1]);
        ggml_tensor * w = ggml_view_2d(ctx, L.conv, C, 1, L.conv->nb[1], j * L.conv->nb[1]);
        ggml_tensor * term = ggml_mul(ctx, tap, w);
        cc = cc ? ggml_add(ctx, cc, term) : term;
    }
    return cc;
}

// the right-context branch of ops/conv.py right_conv, over u [C, T]
static ggml_tensor * right_conv(builder & b, const clover_layer & L, ggml_tensor * u) {
    ggml_context * ctx = b.ctx;
    int64_t C = b.h.conv_dim(), T = b.T;
    ggml_tensor * r = nullptr;
    for (int64_t d = 1; d < b.h.conv_k && d < T; d++) {
        ggml_tensor * sh = ggml_view_2d(ctx, u, C, T - d, u->nb[1], d * u->nb[1]);
        sh = ggml_pad(ctx, ggml_cont(ctx, sh), 0, (int) d, 0, 0);  // u[i + d], zero past the end
        ggml_tensor * w = ggml_view_2d(ctx, L.conv_right, C, 1, L.conv_right->nb[1], (d - 1) * L.conv_right->nb[1]);
        ggml_tensor * term = ggml_mul(ctx, ggml_mul(ctx, sh, b.out.inputs_keep[d - 1]), w);
        r = r ? ggml_add(ctx, r, term) : term;
    }
    return r;
}

// gdn.py _heads: features [C, n] → q̂, k̂ [dk, hv, n] (unit, key heads repeated to value heads
// as repeat_interleave does), v [dv, hv, n]
void builder::heads(ggml_tensor * feat, ggml_tensor ** q, ggml_tensor ** k, ggml_tensor ** v) {
    int64_t n = feat->ne[1], dk = h.dk, dv = h.dv, hk = h.hk, hv = h.hv;
    size_t f = sizeof(float);
    ggml_tensor * qq = ggml_cont(ctx, ggml_view_3d(ctx, feat, dk, hk, n, dk * f, feat->nb[1], 0));
    ggml_tensor * kk = ggml_cont(ctx, ggml_view_3d(ctx, feat, dk, hk, n, dk * f, feat->nb[1], hk * dk * f));
    *v = ggml_cont(ctx, ggml_view_3d(ctx, feat, dv, hv, n, dv * f, feat->nb[1], 2 * hk * dk * f));
    qq = l2norm(qq);
    kk = l2norm(kk);
    if (hv != hk) {
        int64_t rep = hv / hk;
        qq = ggml_reshape_3d(ctx, ggml_repeat_4d(ctx, ggml_reshape_4d(ctx, qq, dk, 1, hk, n), dk, rep, hk, n), dk, hv, n);
        kk = ggml_reshape_3d(ctx, ggml_repeat_4d(ctx, ggml_reshape_4d(ctx, kk, dk, 1, hk, n), dk, rep, hk, n), dk, hv, n);
    }
    *q = qq;
    *k = kk;
}

// gdn.py _history: the committed blocks write the state from the causal features alone (rule 3),
// one ggml_gated_delta_net per block so that the state before every block is at hand.
// Returns the states before each block of the pass (S[b-1]; the cache's state for the first).
std::vector<ggml_tensor *> builder::history(int il, ggml_tensor * x, ggml_tensor * cc, ggml_tensor * g,
                                            ggml_tensor * beta) {
    int64_t hv = h.hv, dk = h.dk, dv = h.dv;
    size_t f = sizeof(float);
    ggml_tensor * S = host(cache.layers[il].S.data(), dk, dv, hv, 1);
    std::vector<ggml_tensor *> before{S};
    if (!p.n_commit) return before;
    ggml_tensor * hist = ggml_silu(ctx, ggml_view_2d(ctx, cc, cc->ne[0], p.n_commit, cc->nb[1], 0));
    ggml_tensor *q, *k, *v;
    heads(ggml_cont(ctx, hist), &q, &k, &v);
    for (auto [s, e] : blocks) {
        if (s >= p.n_commit) break;
        int64_t n = e - s;
        auto tok4 = [&](ggml_tensor * t) {
            return ggml_view_4d(ctx, t, t->ne[0], t->ne[1], n, 1, t->nb[1], t->nb[2], n * t->nb[2], s * t->nb[2]);
        };
        ggml_tensor * gb = ggml_view_4d(ctx, g, 1, hv, n, 1, f, hv * f, hv * n * f, s * hv * f);
        ggml_tensor * bb = ggml_view_4d(ctx, beta, 1, hv, n, 1, f, hv * f, hv * n * f, s * hv * f);
        ggml_tensor * o = ggml_gated_delta_net(ctx, tok4(q), tok4(k), tok4(v), gb, bb, S, 1);
        S = ggml_view_4d(ctx, o, dk, dv, hv, 1, dk * f, dk * dv * f, dk * dv * hv * f, dv * hv * n * f);
        before.push_back(S);
    }
    out.S[il] = output(S);
    return before;
}

// gdn.py _mix for one block of n tokens: softmax over s_h·q̂·k̂ and the memory slot, whose logit
// is q̂·u_h + c_h (+ γ_h·ln n) and value ρ_h·S[b-1]ᵀq̂. q̂, k̂ [dk, hv, n], v [dv, hv, n] → [dv, hv, n]
ggml_tensor * builder::mix(const clover_layer & L, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * S,
                           int64_t n) {
    int64_t hv = h.hv, dk = h.dk, dv = h.dv;
    ggml_tensor * qp = ggml_cont(ctx, ggml_permute(ctx, q, 0, 2, 1, 3));  // [dk, n, hv]
    ggml_tensor * kp = ggml_cont(ctx, ggml_permute(ctx, k, 0, 2, 1, 3));
    ggml_tensor * att = ggml_mul(ctx, ggml_mul_mat(ctx, kp, qp), per_head(L.mix_scale));  // [n keys, n queries, hv]
    ggml_tensor * mem = ggml_mul_mat(ctx, ggml_reshape_3d(ctx, L.mem_key, dk, 1, hv), qp);  // [1, n, hv]
    mem = ggml_add(ctx, mem, per_head(L.mem_bias));
    if (h.calibration) mem = ggml_add(ctx, mem, per_head(ggml_scale(ctx, L.mem_gamma, logf((float) n))));
    ggml_tensor * w = ggml_soft_max(ctx, ggml_concat(ctx, att, mem, 0));  // [n + 1, n, hv]
    ggml_tensor * wb = ggml_cont(ctx, ggml_view_3d(ctx, w, n, n, hv, w->nb[1], w->nb[2], 0));
    ggml_tensor * wm = ggml_cont(ctx, ggml_view_3d(ctx, w, 1, n, hv, w->nb[1], w->nb[2], n * sizeof(float)));
    ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 2, 0, 3));  // [n, dv, hv]
    ggml_tensor * o = ggml_mul_mat(ctx, vt, wb);                          // [dv, n, hv]
    ggml_tensor * r = ggml_mul_mat(ctx, ggml_reshape_3d(ctx, S, dk, dv, hv), qp);  // Sᵀq̂ [dv, n, hv] (no 1/√dk, rule 6)
    r = ggml_mul(ctx, r, per_head(L.mem_scale));
    o = ggml_add(ctx, o, ggml_mul(ctx, r, wm));
    return ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3));  // [dv, hv, n]
}

// gdn.py GatedDeltaNetMixer.forward_step
ggml_tensor * builder::gdn(int il, ggml_tensor * x) {
    const clover_layer & L = m.layers[il];
    int64_t C = h.conv_dim(), K = h.conv_k, hv = h.hv, dv = h.dv;
    ggml_tensor * u = ggml_mul_mat(ctx, L.qkv, x);  // [C, T]
    ggml_tensor * xx = ggml_concat(ctx, host(cache.layers[il].tail.data(), C, K - 1), u, 1);  // rule 2
    if (p.n_commit) out.tail[il] = output(ggml_view_2d(ctx, xx, C, K - 1, xx->nb[1], p.n_commit * xx->nb[1]));
    ggml_tensor * cc = conv(L, xx);
    ggml_tensor * beta = ggml_sigmoid(ctx, ggml_mul_mat(ctx, L.beta, x));  // [hv, T]
    ggml_tensor * g = ggml_softplus(ctx, ggml_add(ctx, ggml_mul_mat(ctx, L.alpha, x), L.dt_bias));
    g = ggml_mul(ctx, g, L.a);  // -exp(A_log) · softplus(a + dt_bias)
    std::vector<ggml_tensor *> before = history(il, x, cc, g, beta);
    ggml_tensor * blk = cc;
    if (h.right_conv) {
        ggml_tensor * r = right_conv(*this, L, u);
        if (r) blk = ggml_add(ctx, cc, r);
    }
    ggml_tensor *q, *k, *v;
    heads(ggml_silu(ctx, blk), &q, &k, &v);
    ggml_tensor * o = nullptr;
    for (size_t b = 0; b < blocks.size(); b++) {
        auto [s, e] = blocks[b];
        ggml_tensor * ob = mix(L, tokens_of(q, s, e - s), tokens_of(k, s, e - s), tokens_of(v, s, e - s),
                               before[std::min(b, before.size() - 1)], e - s);
        o = o ? ggml_concat(ctx, o, ob, 2) : ob;
    }
    ggml_tensor * z = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.z, x), dv, hv, T);
    ggml_tensor * y = ggml_mul(ctx, rms(o, L.ssm_norm), ggml_silu(ctx, z));  // GatedRMSNorm
    return ggml_mul_mat(ctx, L.ssm_out, ggml_reshape_2d(ctx, y, dv * hv, T));
}

// layers.py MoE: softmax router, top-k renormalised, SwiGLU experts, sigmoid-gated shared expert
ggml_tensor * builder::moe(const clover_layer & L, ggml_tensor * x) {
    int64_t H = h.n_embd, E = h.n_expert, k = h.n_expert_used;
    ggml_tensor * probs = ggml_soft_max(ctx, ggml_mul_mat(ctx, L.router, x));  // [E, T]
    ggml_tensor * ids = ggml_argsort_top_k(ctx, probs, (int) k);                 // [k, T]
    ggml_tensor * w = ggml_reshape_2d(ctx, ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, E, T), ids), k, T);
    w = ggml_reshape_3d(ctx, ggml_div(ctx, w, ggml_sum_rows(ctx, w)), 1, k, T);
    ggml_tensor * xg = ggml_reshape_3d(ctx, x, H, 1, T);
    ggml_tensor * gate = ggml_mul_mat_id(ctx, L.gate_exps, xg, ids);  // [I, k, T]
    ggml_tensor * up = ggml_mul_mat_id(ctx, L.up_exps, xg, ids);
    ggml_tensor * down = ggml_mul_mat_id(ctx, L.down_exps, ggml_mul(ctx, ggml_silu(ctx, gate), up), ids);  // [H, k, T]
    down = ggml_mul(ctx, down, w);
    ggml_tensor * y = nullptr;
    for (int64_t i = 0; i < k; i++) {
        ggml_tensor * yi = ggml_view_2d(ctx, down, H, T, down->nb[2], i * down->nb[1]);
        y = y ? ggml_add(ctx, y, yi) : ggml_cont(ctx, yi);
    }
    ggml_tensor * sh = ggml_mul(ctx, ggml_silu(ctx, ggml_mul_mat(ctx, L.gate_sh, x)), ggml_mul_mat(ctx, L.up_sh, x));
    sh = ggml_mul_mat(ctx, L.down_sh, sh);
    ggml_tensor * sg = ggml_sigmoid(ctx, ggml_mul_mat(ctx, L.gate_inp_sh, x));  // [1, T]
    return ggml_add(ctx, y, ggml_mul(ctx, sh, sg));
}

ggml_tensor * builder::ffn(int il, ggml_tensor * x) {
    const clover_layer & L = m.layers[il];
    if (h.n_expert) return moe(L, x);
    ggml_tensor * a = ggml_mul(ctx, ggml_silu(ctx, ggml_mul_mat(ctx, L.ffn_gate, x)), ggml_mul_mat(ctx, L.ffn_up, x));
    return ggml_mul_mat(ctx, L.ffn_down, a);
}

}  // namespace

ggml_cgraph * clover_build_graph(ggml_context * ctx, const clover_model & m, clover_cache & cache,
                                 const clover_pass & p, clover_pass_out & out) {
    const clover_hparams & h = m.hp;
    int64_t T = p.n_commit + p.n_denoise;
    builder b{ctx, m, h, cache, p, out, T, {}};
    for (int64_t s = 0; s < p.n_commit; s += p.block_size) b.blocks.push_back({s, std::min(s + p.block_size, p.n_commit)});
    if (p.n_denoise) b.blocks.push_back({p.n_commit, T});
    out.k.assign(h.n_layer, nullptr);
    out.v.assign(h.n_layer, nullptr);
    out.S.assign(h.n_layer, nullptr);
    out.tail.assign(h.n_layer, nullptr);
    out.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    out.pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    ggml_set_input(out.tokens);
    ggml_set_input(out.pos);
    bool any_attn = false;
    for (bool a : h.is_attn) any_attn = any_attn || a;
    if (any_attn) {
        out.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, p.length + T, T);
        ggml_set_input(out.kq_mask);
    }
    if (h.right_conv) {
        for (int64_t d = 1; d < h.conv_k && d < T; d++) {  // taps past the pass's end read nothing
            ggml_tensor * keep = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, T);
            ggml_set_input(keep);
            out.inputs_keep.push_back(keep);
        }
    }
    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, out.tokens);  // [H, T]
    for (int il = 0; il < (int) h.n_layer; il++) {
        const clover_layer & L = m.layers[il];
        ggml_tensor * a = b.rms(x, L.attn_norm);
        x = ggml_add(ctx, x, h.is_attn[il] ? b.attention(il, a) : b.gdn(il, a));
        x = ggml_add(ctx, x, b.ffn(il, b.rms(x, L.post_norm)));
    }
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, clover_graph_size(h.n_layer, (int64_t) b.blocks.size()), false);
    for (int il = 0; il < (int) h.n_layer; il++)
        for (ggml_tensor * t : {out.k[il], out.v[il], out.S[il], out.tail[il]})
            if (t) ggml_build_forward_expand(gf, t);
    int64_t rows = T - p.first_row;
    if (rows > 0) {
        x = b.rms(x, m.out_norm);
        x = ggml_view_2d(ctx, x, x->ne[0], rows, x->nb[1], p.first_row * x->nb[1]);
        out.logits = ggml_mul_mat(ctx, m.output, x);  // [V, rows]
        ggml_set_output(out.logits);
        ggml_build_forward_expand(gf, out.logits);
    }
    return gf;
}
