// Internal structures shared by clover.cpp (loading, caches, the C API) and clover_graph.cpp
// (the graph of one pass).
#pragma once

#include "clover.h"
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "gguf.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct clover_hparams {
    int64_t n_layer = 0, n_embd = 0, n_vocab = 0;
    std::vector<bool> is_attn;  // per layer: attention (true) or GDN (false)
    float eps = 1e-6f;
    // attention
    int64_t n_head = 0, n_head_kv = 0, head_dim = 0, rope_dims = 0;
    float rope_base = 10000.0f;
    // GDN
    int64_t conv_k = 4, hk = 0, hv = 0, dk = 0, dv = 0;
    bool right_conv = true, calibration = true;
    // feed-forward
    int64_t n_expert = 0, n_expert_used = 0;
    int64_t n_ff = 0, n_ff_exp = 0, n_ff_shexp = 0;  // dense, routed-expert and shared-expert widths
    // blocks and tokens
    int64_t block_size = 32, max_block_size = 128, mask_token_id = 0;
    bool shift_logits = false;
    int64_t conv_dim() const { return 2 * hk * dk + hv * dv; }
};

struct clover_layer {
    ggml_tensor *attn_norm = nullptr, *post_norm = nullptr;
    // attention
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    // GDN
    ggml_tensor *qkv = nullptr, *z = nullptr, *beta = nullptr, *alpha = nullptr, *conv = nullptr, *conv_right = nullptr;
    ggml_tensor *dt_bias = nullptr, *a = nullptr, *ssm_norm = nullptr, *ssm_out = nullptr;
    ggml_tensor *mix_scale = nullptr, *mem_key = nullptr, *mem_bias = nullptr, *mem_gamma = nullptr, *mem_scale = nullptr;
    // feed-forward: MoE with a shared expert, or dense
    ggml_tensor *router = nullptr, *gate_exps = nullptr, *up_exps = nullptr, *down_exps = nullptr;
    ggml_tensor *gate_sh = nullptr, *up_sh = nullptr, *down_sh = nullptr, *gate_inp_sh = nullptr;
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
};

struct clover_model {
    clover_hparams hp;
    std::vector<clover_layer> layers;
    ggml_tensor *tok_embd = nullptr, *out_norm = nullptr, *output = nullptr;
    gguf_context * gguf = nullptr;
    ggml_context * weights = nullptr;
    ggml_backend_t backend = nullptr;
    ggml_gallocr_t galloc = nullptr;
    void * map = nullptr;  // the file, mapped read-only: the weights' data points into it
    size_t map_size = 0;
    int n_threads = 1;
};

// one layer's committed history: attention K/V [head_dim, n_head_kv, length] (f32), or the GDN
// state S [dk, dv, hv] (S[i][j] at i + j*dk, ggml_gated_delta_net's layout) and the conv tail
// [conv_dim, conv_k - 1]
struct clover_layer_cache {
    std::vector<float> k, v, S, tail;
};

struct clover_cache {
    std::vector<clover_layer_cache> layers;
    int64_t length = 0;
    std::vector<float> last_logits;  // [n_vocab] clean logit at the last committed position (shift_logits)
};

// what one pass produces besides the logits: per layer the new history to append or replace
struct clover_pass_out {
    std::vector<ggml_tensor *> k, v, S, tail;  // per layer, null where not produced
    ggml_tensor * logits = nullptr;            // [n_vocab, rows]
    std::vector<ggml_tensor *> inputs_keep;    // right-conv masks, one per tap d = 1..K-1
    ggml_tensor *tokens = nullptr, *pos = nullptr, *kq_mask = nullptr;
};

struct clover_pass {
    int64_t n_commit = 0, n_denoise = 0, block_size = 0, length = 0;
    int64_t first_row = 0;  // first hidden row that reaches the head (n_commit - 1 when its logit is kept)
};

// builds the graph of one pass into ctx (no_alloc) over the cache's history
ggml_cgraph * clover_build_graph(ggml_context * ctx, const clover_model & m, clover_cache & cache,
                                 const clover_pass & p, clover_pass_out & out);
// nodes (and tensors) a pass of n_blocks blocks may need
inline size_t clover_graph_size(int64_t n_layer, int64_t n_blocks) {
    return 4096 + (size_t) n_layer * (128 + (n_blocks + 1) * 96);
}

void clover_set_error(const std::string & msg);

// every function of the C API runs its body through guard: a C++ exception (std::bad_alloc on a
// huge request, a bug) becomes the function's error value and clover_last_error, never an
// exception crossing extern "C" (which would terminate the host process)
template <typename T, typename F> T guard(T on_error, F && body) {
    try {
        return body();
    } catch (const std::exception & e) {
        clover_set_error(e.what());
    } catch (...) {
        clover_set_error("unknown C++ exception");
    }
    return on_error;
}

// why a pass cannot run ("" when it can): the checks of clover_step
std::string clover_check_pass(const clover_model & m, const clover_cache & c, const int32_t * commit, int64_t n_c,
                              const int32_t * denoise, int64_t n_d, int64_t bs);

// the graph of one pass, built and allocated over the cache as it is now (clover.cpp). `run` fills
// the inputs, computes, writes a commit into the cache and the denoise logits into `logits`. A
// denoise-only pass leaves the cache as it was, so the same built pass runs again with other
// denoise tokens (the passes of one block); after a commit it must be built afresh. Throws on error.
struct clover_built_pass {
    std::unique_ptr<ggml_context, void (*)(ggml_context *)> ctx{nullptr, ggml_free};
    ggml_cgraph * gf = nullptr;
    clover_pass p;
    clover_pass_out o;
    void build(clover_model & m, clover_cache & c, int64_t n_commit, int64_t n_denoise, int64_t block_size);
    void run(clover_model & m, clover_cache & c, const int32_t * commit, const int32_t * denoise, float * logits);
};

// a file that cannot be loaded; the message names the key or tensor at fault
struct load_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// reads and checks the GGUF file at path into m (clover_load.cpp); throws load_error
void clover_load(clover_model & m, const char * path);
