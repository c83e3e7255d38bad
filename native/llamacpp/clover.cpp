// Loading a Clover GGUF file, the per-sequence caches and the C API (clover.h). The graph of a
// pass is clover_graph.cpp.
#include "clover_impl.h"

#include "ggml-cpu.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

static thread_local std::string g_error;

void clover_set_error(const std::string & msg) { g_error = msg; }
const char * clover_last_error(void) { return g_error.c_str(); }

namespace {

struct load_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int64_t key_id(const gguf_context * g, const std::string & key, bool required = true) {
    int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0 && required) throw load_error("missing metadata key " + key);
    return id;
}

int64_t get_u32(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_UINT32) throw load_error(key + " is not a uint32");
    return gguf_get_val_u32(g, id);
}

float get_f32(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_FLOAT32) throw load_error(key + " is not a float32");
    return gguf_get_val_f32(g, id);
}

bool get_bool(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_BOOL) throw load_error(key + " is not a bool");
    return gguf_get_val_bool(g, id);
}

std::string get_str(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) throw load_error(key + " is not a string");
    return gguf_get_val_str(g, id);
}

void read_hparams(const gguf_context * g, clover_hparams & hp) {
    if (get_str(g, "general.architecture") != "clover") throw load_error("general.architecture is not 'clover'");
    if (get_u32(g, "clover.gguf_version") != 1) throw load_error("unsupported clover.gguf_version (re-export the model)");
    hp.n_layer = get_u32(g, "clover.block_count");
    hp.n_embd = get_u32(g, "clover.embedding_length");
    hp.n_vocab = get_u32(g, "clover.vocab_size");
    int64_t lt = key_id(g, "clover.layer_types");
    if (gguf_get_kv_type(g, lt) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, lt) != GGUF_TYPE_STRING ||
        (int64_t) gguf_get_arr_n(g, lt) != hp.n_layer)
        throw load_error("clover.layer_types must be one string per layer");
    for (int64_t i = 0; i < hp.n_layer; i++) {
        std::string t = gguf_get_arr_str(g, lt, i);
        if (t != "attention" && t != "gdn") throw load_error("unknown layer type '" + t + "'");
        hp.is_attn.push_back(t == "attention");
    }
    hp.eps = get_f32(g, "clover.attention.layer_norm_rms_epsilon");
    hp.n_head = get_u32(g, "clover.attention.head_count");
    hp.n_head_kv = get_u32(g, "clover.attention.head_count_kv");
    hp.head_dim = get_u32(g, "clover.attention.key_length");
    hp.rope_dims = get_u32(g, "clover.rope.dimension_count");
    hp.rope_base = get_f32(g, "clover.rope.freq_base");
    hp.conv_k = get_u32(g, "clover.ssm.conv_kernel");
    hp.hk = get_u32(g, "clover.ssm.group_count");
    hp.hv = get_u32(g, "clover.ssm.time_step_rank");
    hp.dk = get_u32(g, "clover.ssm.state_size");
    hp.dv = get_u32(g, "clover.ssm.value_head_dim");
    hp.n_expert = get_u32(g, "clover.expert_count");
    hp.n_expert_used = get_u32(g, "clover.expert_used_count");
    hp.block_size = get_u32(g, "clover.block_size");
    hp.max_block_size = get_u32(g, "clover.max_block_size");
    hp.shift_logits = get_bool(g, "clover.shift_logits");
    hp.right_conv = get_bool(g, "clover.gdn.right_conv");
    hp.calibration = get_bool(g, "clover.gdn.block_calibration");
    hp.mask_token_id = get_u32(g, "clover.mask_token_id");
    if (get_str(g, "clover.gdn.block_mixing") != "bidirectional")
        throw load_error("clover.gdn.block_mixing: only 'bidirectional' is implemented");
    if (hp.dk != hp.dv) throw load_error("GDN key and value head dims must be equal (ggml_gated_delta_net)");
    if (hp.conv_k < 2) throw load_error("clover.ssm.conv_kernel must be >= 2");
    if (hp.hk == 0 || hp.hv % hp.hk || hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv)
        throw load_error("head counts must divide (value heads by key heads, query heads by kv heads)");
}

ggml_tensor * tensor(const clover_model & m, const std::string & name, std::vector<int64_t> ne) {
    ggml_tensor * t = ggml_get_tensor(m.weights, name.c_str());
    if (!t) throw load_error("missing tensor " + name);
    for (size_t d = 0; d < GGML_MAX_DIMS; d++) {
        int64_t want = d < ne.size() ? ne[d] : 1;
        if (t->ne[d] != want) throw load_error("tensor " + name + " has the wrong shape");
    }
    return t;
}

// the second dimension of a weight whose width only the file says (the feed-forward widths)
int64_t width_of(const clover_model & m, const std::string & name) {
    ggml_tensor * t = ggml_get_tensor(m.weights, name.c_str());
    if (!t) throw load_error("missing tensor " + name);
    return t->ne[1];
}

void bind_attention(clover_model & m, clover_layer & L, const std::string & p) {
    const clover_hparams & h = m.hp;
    int64_t H = h.n_embd, D = h.head_dim;
    L.wq = tensor(m, p + "attn_q.weight", {H, 2 * D * h.n_head});
    L.wk = tensor(m, p + "attn_k.weight", {H, D * h.n_head_kv});
    L.wv = tensor(m, p + "attn_v.weight", {H, D * h.n_head_kv});
    L.wo = tensor(m, p + "attn_output.weight", {D * h.n_head, H});
    L.q_norm = tensor(m, p + "attn_q_norm.weight", {D});
    L.k_norm = tensor(m, p + "attn_k_norm.weight", {D});
}

void bind_gdn(clover_model & m, clover_layer & L, const std::string & p) {
    const clover_hparams & h = m.hp;
    int64_t H = h.n_embd, C = h.conv_dim(), HV = h.hv;
    L.qkv = tensor(m, p + "attn_qkv.weight", {H, C});
    L.z = tensor(m, p + "attn_gate.weight", {H, HV * h.dv});
    L.beta = tensor(m, p + "ssm_beta.weight", {H, HV});
    L.alpha = tensor(m, p + "ssm_alpha.weight", {H, HV});
    L.conv = tensor(m, p + "ssm_conv1d.weight", {C, h.conv_k});
    L.conv_right = tensor(m, p + "ssm_conv_right.weight", {C, h.conv_k - 1});
    L.dt_bias = tensor(m, p + "ssm_dt.bias", {HV});
    L.a = tensor(m, p + "ssm_a", {HV});
    L.ssm_norm = tensor(m, p + "ssm_norm.weight", {h.dv});
    L.ssm_out = tensor(m, p + "ssm_out.weight", {HV * h.dv, H});
    L.mix_scale = tensor(m, p + "ssm_mix_scale", {HV});
    L.mem_key = tensor(m, p + "ssm_mem_key", {h.dk, HV});
    L.mem_bias = tensor(m, p + "ssm_mem_bias", {HV});
    L.mem_gamma = tensor(m, p + "ssm_mem_gamma", {HV});
    L.mem_scale = tensor(m, p + "ssm_mem_scale", {HV});
}

void bind_ffn(clover_model & m, clover_layer & L, const std::string & p) {
    const clover_hparams & h = m.hp;
    int64_t H = h.n_embd;
    if (h.n_expert == 0) {
        int64_t I = width_of(m, p + "ffn_gate.weight");
        L.ffn_gate = tensor(m, p + "ffn_gate.weight", {H, I});
        L.ffn_up = tensor(m, p + "ffn_up.weight", {H, I});
        L.ffn_down = tensor(m, p + "ffn_down.weight", {I, H});
        return;
    }
    int64_t E = h.n_expert;
    L.router = tensor(m, p + "ffn_gate_inp.weight", {H, E});
    int64_t I = width_of(m, p + "ffn_gate_exps.weight");
    L.gate_exps = tensor(m, p + "ffn_gate_exps.weight", {H, I, E});
    L.up_exps = tensor(m, p + "ffn_up_exps.weight", {H, I, E});
    L.down_exps = tensor(m, p + "ffn_down_exps.weight", {I, H, E});
    int64_t S = width_of(m, p + "ffn_gate_shexp.weight");
    L.gate_sh = tensor(m, p + "ffn_gate_shexp.weight", {H, S});
    L.up_sh = tensor(m, p + "ffn_up_shexp.weight", {H, S});
    L.down_sh = tensor(m, p + "ffn_down_shexp.weight", {S, H});
    L.gate_inp_sh = tensor(m, p + "ffn_gate_inp_shexp.weight", {H});
}

void bind_tensors(clover_model & m) {
    const clover_hparams & h = m.hp;
    m.tok_embd = tensor(m, "token_embd.weight", {h.n_embd, h.n_vocab});
    m.out_norm = tensor(m, "output_norm.weight", {h.n_embd});
    m.output = tensor(m, "output.weight", {h.n_embd, h.n_vocab});
    for (int64_t i = 0; i < h.n_layer; i++) {
        clover_layer L;
        std::string p = "blk." + std::to_string(i) + ".";
        L.attn_norm = tensor(m, p + "attn_norm.weight", {h.n_embd});
        L.post_norm = tensor(m, p + "post_attention_norm.weight", {h.n_embd});
        if (h.is_attn[i]) bind_attention(m, L, p);
        else bind_gdn(m, L, p);
        bind_ffn(m, L, p);
        m.layers.push_back(L);
    }
}

}  // namespace

clover_model * clover_model_load(const char * path, int n_threads) {
    auto * m = new clover_model();
    try {
        gguf_init_params params = {/*no_alloc =*/false, /*ctx =*/&m->weights};
        m->gguf = gguf_init_from_file(path, params);
        if (!m->gguf) throw load_error(std::string("cannot read GGUF file ") + path);
        read_hparams(m->gguf, m->hp);
        bind_tensors(*m);
        m->backend = ggml_backend_cpu_init();
        if (!m->backend) throw load_error("cannot start ggml's CPU back end");
        m->galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
        clover_model_set_threads(m, n_threads);
    } catch (const std::exception & e) {
        clover_set_error(std::string(path) + ": " + e.what());
        clover_model_free(m);
        return nullptr;
    }
    return m;
}

void clover_model_free(clover_model * m) {
    if (!m) return;
    if (m->galloc) ggml_gallocr_free(m->galloc);
    if (m->backend) ggml_backend_free(m->backend);
    if (m->weights) ggml_free(m->weights);
    if (m->gguf) gguf_free(m->gguf);
    delete m;
}

void clover_model_set_threads(clover_model * m, int n_threads) {
    m->n_threads = n_threads > 0 ? n_threads : 1;
    if (m->backend) ggml_backend_cpu_set_n_threads(m->backend, m->n_threads);
}

int64_t clover_model_get(const clover_model * m, const char * name) {
    std::string n = name;
    const clover_hparams & h = m->hp;
    if (n == "n_vocab") return h.n_vocab;
    if (n == "block_size") return h.block_size;
    if (n == "max_block_size") return h.max_block_size;
    if (n == "shift_logits") return h.shift_logits;
    if (n == "mask_token_id") return h.mask_token_id;
    if (n == "n_layer") return h.n_layer;
    if (n == "n_embd") return h.n_embd;
    return -1;
}

const char * clover_model_meta(const clover_model * m, const char * key) {
    int64_t id = gguf_find_key(m->gguf, key);
    if (id < 0 || gguf_get_kv_type(m->gguf, id) != GGUF_TYPE_STRING) return nullptr;
    return gguf_get_val_str(m->gguf, id);
}

clover_cache * clover_cache_new(const clover_model * m) {
    auto * c = new clover_cache();
    const clover_hparams & h = m->hp;
    c->layers.resize(h.n_layer);
    for (int64_t i = 0; i < h.n_layer; i++) {
        if (h.is_attn[i]) continue;
        c->layers[i].S.assign(h.dk * h.dv * h.hv, 0.0f);  // rule 5: block 0 starts from an empty state
        c->layers[i].tail.assign(h.conv_dim() * (h.conv_k - 1), 0.0f);
    }
    return c;
}

void clover_cache_free(clover_cache * c) { delete c; }
clover_cache * clover_cache_copy(const clover_cache * c) { return new clover_cache(*c); }
int64_t clover_cache_length(const clover_cache * c) { return c->length; }
int64_t clover_cache_nbytes(const clover_cache * c) {
    size_t n = c->last_logits.size();
    for (const auto & l : c->layers) n += l.k.size() + l.v.size() + l.S.size() + l.tail.size();
    return (int64_t) (n * sizeof(float));
}

namespace {

std::string check_pass(const clover_model & m, const clover_cache & c, const int32_t * commit, int64_t n_c,
                       const int32_t * denoise, int64_t n_d, int64_t bs) {
    const clover_hparams & h = m.hp;
    if (bs <= 0) return "block_size must be a positive integer, got " + std::to_string(bs);
    if (bs > h.max_block_size)
        return "block_size " + std::to_string(bs) + " exceeds this model's max_block_size " +
               std::to_string(h.max_block_size);
    if (n_c < 0 || n_d < 0 || n_c + n_d == 0) return "step needs tokens to commit or to denoise";
    if (n_c % bs && n_d)
        return "commit of " + std::to_string(n_c) + " tokens is not whole blocks of " + std::to_string(bs) +
               "; cannot denoise after it";
    if (n_d > bs)
        return "denoise block of " + std::to_string(n_d) + " tokens exceeds block size " + std::to_string(bs);
    if (c.length % bs)
        return "cache length " + std::to_string(c.length) + " is not a block boundary of " + std::to_string(bs);
    if (c.layers.size() != (size_t) h.n_layer) return "the cache belongs to another model";
    for (int64_t i = 0; i < n_c + n_d; i++) {
        int32_t t = i < n_c ? commit[i] : denoise[i - n_c];
        if (t < 0 || t >= h.n_vocab)
            return "token ids must lie in [0, " + std::to_string(h.n_vocab) + "), got " + std::to_string(t);
    }
    return "";
}

void fill_inputs(const clover_model & m, const clover_pass & p, const clover_pass_out & o, const int32_t * commit,
                 const int32_t * denoise) {
    int64_t T = p.n_commit + p.n_denoise, bs = p.block_size, L = p.length;
    auto * tok = (int32_t *) o.tokens->data;
    auto * pos = (int32_t *) o.pos->data;  // null without attention layers
    for (int64_t i = 0; i < T; i++) {
        tok[i] = i < p.n_commit ? commit[i] : denoise[i - p.n_commit];
        if (pos) pos[i] = (int32_t) (L + i);
    }
    // an input that no output needs is left out of the graph (e.g. the mask of a last attention
    // layer when a commit keeps no logit): it has no memory
    if (o.kq_mask && o.kq_mask->data) {  // block-causal: history, then the new tokens of the query's own and earlier blocks
        auto * mask = (float *) o.kq_mask->data;
        int64_t nk = o.kq_mask->ne[0];
        for (int64_t t = 0; t < T; t++)
            for (int64_t s = 0; s < nk; s++)
                mask[t * nk + s] = (s < L || (s - L) / bs <= t / bs) ? 0.0f : -INFINITY;
    }
    for (size_t d = 1; d <= o.inputs_keep.size(); d++) {  // right-conv tap d: i + d inside i's block
        auto * keep = (float *) o.inputs_keep[d - 1]->data;
        if (!keep) continue;
        for (int64_t i = 0; i < T; i++)
            keep[i] = (i + (int64_t) d < T && (i + (int64_t) d) / bs == i / bs) ? 1.0f : 0.0f;
    }
}

void append(std::vector<float> & dst, const ggml_tensor * t) {
    size_t n = ggml_nelements(t);
    size_t at = dst.size();
    dst.resize(at + n);
    memcpy(dst.data() + at, t->data, n * sizeof(float));
}

void replace(std::vector<float> & dst, const ggml_tensor * t) {
    dst.resize(ggml_nelements(t));
    memcpy(dst.data(), t->data, dst.size() * sizeof(float));
}

void commit_outputs(const clover_model & m, clover_cache & c, const clover_pass & p, const clover_pass_out & o) {
    for (int64_t i = 0; i < m.hp.n_layer; i++) {
        clover_layer_cache & lc = c.layers[i];
        if (o.k[i]) append(lc.k, o.k[i]);
        if (o.v[i]) append(lc.v, o.v[i]);
        if (o.S[i]) replace(lc.S, o.S[i]);
        if (o.tail[i]) replace(lc.tail, o.tail[i]);
    }
    c.length += p.n_commit;
}

void read_logits(const clover_model & m, clover_cache & c, const clover_pass & p, const clover_pass_out & o,
                 float * logits) {
    int64_t V = m.hp.n_vocab;
    if (!o.logits) return;
    const float * rows = (const float *) o.logits->data;
    if (p.n_commit && m.hp.shift_logits) c.last_logits.assign(rows, rows + V);  // rule 4
    if (!p.n_denoise) return;
    const float * raw = rows + (p.n_commit - p.first_row) * V;  // the denoise rows
    if (!m.hp.shift_logits) {
        memcpy(logits, raw, p.n_denoise * V * sizeof(float));
        return;
    }
    if (c.last_logits.empty()) memset(logits, 0, V * sizeof(float));
    else memcpy(logits, c.last_logits.data(), V * sizeof(float));
    memcpy(logits + V, raw, (p.n_denoise - 1) * V * sizeof(float));
}

}  // namespace

int clover_step(clover_model * m, clover_cache * c, const int32_t * commit, int64_t n_c, const int32_t * denoise,
                int64_t n_d, int64_t bs, float * logits) {
    std::string problem = check_pass(*m, *c, commit, n_c, denoise, n_d, bs);
    if (!problem.empty()) {
        clover_set_error(problem);
        return -1;
    }
    clover_pass p;
    p.n_commit = n_c;
    p.n_denoise = n_d;
    p.block_size = bs;
    p.length = c->length;
    p.first_row = (n_c && m->hp.shift_logits) ? n_c - 1 : n_c;
    size_t max_nodes = clover_graph_size(m->hp.n_layer, (n_c + n_d + bs - 1) / bs + 1);
    ggml_init_params ip = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false),
                           nullptr, /*no_alloc =*/true};
    ggml_context * ctx = ggml_init(ip);
    clover_pass_out o;
    ggml_cgraph * gf = clover_build_graph(ctx, *m, *c, p, o);
    int rc = 0;
    if (!gf || !ggml_gallocr_alloc_graph(m->galloc, gf)) {
        clover_set_error("cannot allocate the graph of a pass");
        rc = -1;
    } else {
        fill_inputs(*m, p, o, commit, denoise);
        if (ggml_backend_graph_compute(m->backend, gf) != GGML_STATUS_SUCCESS) {
            clover_set_error("ggml failed to compute the pass");
            rc = -1;
        } else {
            if (n_c) commit_outputs(*m, *c, p, o);
            read_logits(*m, *c, p, o, logits);
        }
    }
    ggml_free(ctx);
    return rc;
}

namespace {

ggml_type type_named(const char * name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && strcasecmp(n, name) == 0) return (ggml_type) t;
    }
    return GGML_TYPE_COUNT;
}

}  // namespace

size_t clover_quantized_size(const char * type, int64_t nrows, int64_t n_per_row) {
    ggml_type t = type_named(type);
    if (t == GGML_TYPE_COUNT || n_per_row <= 0 || nrows < 0 || n_per_row % ggml_blck_size(t)) return 0;
    return ggml_row_size(t, n_per_row) * nrows;
}

size_t clover_quantize(const char * type, const float * src, void * dst, int64_t nrows, int64_t n_per_row) {
    if (!clover_quantized_size(type, nrows, n_per_row)) {
        clover_set_error(std::string("cannot quantize rows of ") + std::to_string(n_per_row) + " values to " + type);
        return 0;
    }
    return ggml_quantize_chunk(type_named(type), src, dst, 0, nrows, n_per_row, nullptr);
}
