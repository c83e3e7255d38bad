// Loading a Clover GGUF file, the per-sequence caches and the C API (clover.h). The graph of a
// pass is clover_graph.cpp.
#include "clover_impl.h"

#include "ggml-cpu.h"

#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

static thread_local std::string g_error;

void clover_set_error(const std::string & msg) { g_error = msg; }
const char * clover_last_error(void) { return g_error.c_str(); }

clover_model * clover_model_load(const char * path, int n_threads) {
    if (!path) {
        clover_set_error("no path given");
        return nullptr;
    }
    clover_model * m = nullptr;
    try {
        m = new clover_model();
        clover_load(*m, path);
        m->backend = ggml_backend_cpu_init();
        if (!m->backend) throw load_error("cannot start ggml's CPU back end");
        m->galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
        if (!m->galloc) throw load_error("cannot create ggml's graph allocator");
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
    if (m->map) munmap(m->map, m->map_size);
    delete m;
}

void clover_model_set_threads(clover_model * m, int n_threads) {
    if (!m) return;
    m->n_threads = n_threads > 0 ? n_threads : 1;
    if (m->backend) ggml_backend_cpu_set_n_threads(m->backend, m->n_threads);
}

int64_t clover_model_get(const clover_model * m, const char * name) {
    if (!m || !name) return -1;
    return guard<int64_t>(-1, [&]() -> int64_t {
        std::string n = name;
        const clover_hparams & h = m->hp;
        const std::pair<const char *, int64_t> ints[] = {
            {"n_vocab", h.n_vocab}, {"block_size", h.block_size}, {"max_block_size", h.max_block_size},
            {"shift_logits", h.shift_logits}, {"mask_token_id", h.mask_token_id}, {"n_layer", h.n_layer},
            {"n_embd", h.n_embd}, {"n_head", h.n_head}, {"n_head_kv", h.n_head_kv}, {"head_dim", h.head_dim},
            {"rope_dims", h.rope_dims}, {"conv_k", h.conv_k}, {"hk", h.hk}, {"hv", h.hv}, {"dk", h.dk},
            {"dv", h.dv}, {"n_expert", h.n_expert}, {"n_expert_used", h.n_expert_used}, {"n_ff", h.n_ff},
            {"n_ff_exp", h.n_ff_exp}, {"n_ff_shexp", h.n_ff_shexp}, {"right_conv", h.right_conv},
            {"calibration", h.calibration}, {"n_attention", 0}};
        for (const auto & kv : ints)
            if (n == kv.first) {
                if (n != "n_attention") return kv.second;
                int64_t c = 0;
                for (bool a : h.is_attn) c += a;
                return c;
            }
        const std::string layer = "is_attention.";  // is_attention.<i>: 1 for an attention layer, 0 for GDN
        if (n.compare(0, layer.size(), layer) == 0) {
            int64_t i = std::stoll(n.substr(layer.size()));
            return i >= 0 && i < h.n_layer ? (int64_t) h.is_attn[i] : -1;
        }
        return -1;
    });
}

double clover_model_get_float(const clover_model * m, const char * name) {
    if (!m || !name) return NAN;
    std::string n = name;
    if (n == "eps") return m->hp.eps;
    if (n == "rope_base") return m->hp.rope_base;
    return NAN;
}

const char * clover_model_meta(const clover_model * m, const char * key) {
    if (!m || !key) return nullptr;
    int64_t id = gguf_find_key(m->gguf, key);
    if (id < 0 || gguf_get_kv_type(m->gguf, id) != GGUF_TYPE_STRING) return nullptr;
    return gguf_get_val_str(m->gguf, id);
}

clover_cache * clover_cache_new(const clover_model * m) {
    if (!m) return nullptr;
    return guard<clover_cache *>(nullptr, [&] {
        auto * c = new clover_cache();
        const clover_hparams & h = m->hp;
        c->layers.resize(h.n_layer);
        for (int64_t i = 0; i < h.n_layer; i++) {
            if (h.is_attn[i]) continue;
            c->layers[i].S.assign(h.dk * h.dv * h.hv, 0.0f);  // rule 5: block 0 starts from an empty state
            c->layers[i].tail.assign(h.conv_dim() * (h.conv_k - 1), 0.0f);
        }
        return c;
    });
}

void clover_cache_free(clover_cache * c) { delete c; }
clover_cache * clover_cache_copy(const clover_cache * c) {
    if (!c) return nullptr;
    return guard<clover_cache *>(nullptr, [&] { return new clover_cache(*c); });
}
int64_t clover_cache_length(const clover_cache * c) { return c ? c->length : -1; }
int64_t clover_cache_nbytes(const clover_cache * c) {
    if (!c) return -1;
    size_t n = c->last_logits.size();
    for (const auto & l : c->layers) n += l.k.size() + l.v.size() + l.S.size() + l.tail.size();
    return (int64_t) (n * sizeof(float));
}

std::string clover_check_pass(const clover_model & m, const clover_cache & c, const int32_t * commit, int64_t n_c,
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

namespace {

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

void clover_built_pass::build(clover_model & m, clover_cache & c, int64_t n_c, int64_t n_d, int64_t bs) {
    p = clover_pass();
    p.n_commit = n_c;
    p.n_denoise = n_d;
    p.block_size = bs;
    p.length = c.length;
    p.first_row = (n_c && m.hp.shift_logits) ? n_c - 1 : n_c;
    size_t max_nodes = clover_graph_size(m.hp.n_layer, (n_c + n_d + bs - 1) / bs + 1);
    ggml_init_params ip = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false),
                           nullptr, /*no_alloc =*/true};
    ctx.reset(ggml_init(ip));
    if (!ctx) throw std::runtime_error("cannot allocate the graph of a pass (ggml_init)");
    o = clover_pass_out();
    gf = clover_build_graph(ctx.get(), m, c, p, o);
    if (!gf || !ggml_gallocr_alloc_graph(m.galloc, gf)) throw std::runtime_error("cannot allocate the graph of a pass");
}

void clover_built_pass::run(clover_model & m, clover_cache & c, const int32_t * commit, const int32_t * denoise,
                            float * logits) {
    fill_inputs(m, p, o, commit, denoise);
    if (ggml_backend_graph_compute(m.backend, gf) != GGML_STATUS_SUCCESS)
        throw std::runtime_error("ggml failed to compute the pass");
    if (p.n_commit) commit_outputs(m, c, p, o);
    read_logits(m, c, p, o, logits);
}

namespace {

int step(clover_model * m, clover_cache * c, const int32_t * commit, int64_t n_c, const int32_t * denoise,
         int64_t n_d, int64_t bs, float * logits) {
    std::string problem = clover_check_pass(*m, *c, commit, n_c, denoise, n_d, bs);
    if (!problem.empty()) {
        clover_set_error(problem);
        return -1;
    }
    clover_built_pass pass;
    pass.build(*m, *c, n_c, n_d, bs);
    pass.run(*m, *c, commit, denoise, logits);
    return 0;
}

}  // namespace

int clover_step(clover_model * m, clover_cache * c, const int32_t * commit, int64_t n_c, const int32_t * denoise,
                int64_t n_d, int64_t bs, float * logits) {
    if (!m || !c || (n_c > 0 && !commit) || (n_d > 0 && (!denoise || !logits))) {
        clover_set_error("clover_step: a null model, cache or buffer");
        return -1;
    }
    return guard<int>(-1, [&] { return step(m, c, commit, n_c, denoise, n_d, bs, logits); });
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
    if (!type) return 0;
    ggml_type t = type_named(type);
    // ggml_quantize_chunk asserts on a type it has no quantizer for, or one that needs an
    // importance matrix: those are refused here
    bool quantizable = t != GGML_TYPE_COUNT && (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_F32 ||
                                                 (ggml_is_quantized(t) && !ggml_quantize_requires_imatrix(t)));
    if (!quantizable || n_per_row <= 0 || nrows < 0 || n_per_row % ggml_blck_size(t)) return 0;
    return ggml_row_size(t, n_per_row) * nrows;
}

size_t clover_quantize(const char * type, const float * src, void * dst, int64_t nrows, int64_t n_per_row) {
    if (!type || !src || !dst) {
        clover_set_error("clover_quantize: a null argument");
        return 0;
    }
    if (!clover_quantized_size(type, nrows, n_per_row)) {
        clover_set_error(std::string("cannot quantize rows of ") + std::to_string(n_per_row) + " values to " + type);
        return 0;
    }
    return ggml_quantize_chunk(type_named(type), src, dst, 0, nrows, n_per_row, nullptr);
}
