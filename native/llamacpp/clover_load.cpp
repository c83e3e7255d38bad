// Loading a Clover GGUF file (clover_model_load): the header and tensor table parsed by gguf, the
// tensor data mapped from the file (not read), and every check that keeps a bad file from
// reaching a ggml assertion at the first pass: the architecture and version, each hyper-parameter
// in range, every tensor the graph binds present with its shape and one of the types the graph
// takes, no tensor left over, and each tensor's bytes inside the file. A failure throws
// load_error with a message that names the key or the tensor.
#include "clover_impl.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <set>
#include <string>

namespace {

int64_t key_id(const gguf_context * g, const std::string & key) {
    int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) throw load_error("missing metadata key " + key);
    return id;
}

int64_t get_u32(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_UINT32) throw load_error("metadata key " + key + " is not a uint32");
    return gguf_get_val_u32(g, id);
}

float get_f32(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_FLOAT32) throw load_error("metadata key " + key + " is not a float32");
    return gguf_get_val_f32(g, id);
}

bool get_bool(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_BOOL) throw load_error("metadata key " + key + " is not a bool");
    return gguf_get_val_bool(g, id);
}

std::string get_str(const gguf_context * g, const std::string & key) {
    int64_t id = key_id(g, key);
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) throw load_error("metadata key " + key + " is not a string");
    return gguf_get_val_str(g, id);
}

void need(bool ok, const std::string & what) {
    if (!ok) throw load_error(what);
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
        throw load_error("metadata key clover.layer_types must be one string per layer (clover.block_count)");
    for (int64_t i = 0; i < hp.n_layer; i++) {
        std::string t = gguf_get_arr_str(g, lt, i);
        if (t != "attention" && t != "gdn") throw load_error("clover.layer_types: unknown layer type '" + t + "'");
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
    hp.n_ff = get_u32(g, "clover.feed_forward_length");
    hp.n_ff_exp = get_u32(g, "clover.expert_feed_forward_length");
    hp.n_ff_shexp = get_u32(g, "clover.expert_shared_feed_forward_length");
    hp.block_size = get_u32(g, "clover.block_size");
    hp.max_block_size = get_u32(g, "clover.max_block_size");
    hp.shift_logits = get_bool(g, "clover.shift_logits");
    hp.right_conv = get_bool(g, "clover.gdn.right_conv");
    hp.calibration = get_bool(g, "clover.gdn.block_calibration");
    hp.mask_token_id = get_u32(g, "clover.mask_token_id");
    if (get_str(g, "clover.gdn.block_mixing") != "bidirectional")
        throw load_error("clover.gdn.block_mixing: only 'bidirectional' is implemented");
    // the ranges the graph relies on (a flipped byte in the header must not reach ggml)
    need(hp.n_layer > 0 && hp.n_embd > 0 && hp.n_vocab > 0,
         "clover.block_count, clover.embedding_length and clover.vocab_size must be positive");
    need(std::isfinite(hp.eps) && hp.eps > 0, "clover.attention.layer_norm_rms_epsilon must be a positive number");
    need(hp.block_size > 0 && hp.block_size <= hp.max_block_size,
         "clover.block_size must be positive and at most clover.max_block_size");
    need(hp.mask_token_id < hp.n_vocab, "clover.mask_token_id must be a token id (below clover.vocab_size)");
    bool any_attn = false, any_gdn = false;
    for (bool a : hp.is_attn) (a ? any_attn : any_gdn) = true;
    if (any_attn) {
        need(hp.n_head > 0 && hp.n_head_kv > 0 && hp.head_dim > 0 && hp.n_head % hp.n_head_kv == 0,
             "clover.attention.head_count must be a positive multiple of head_count_kv, key_length positive");
        need(hp.rope_dims % 2 == 0 && hp.rope_dims <= hp.head_dim,
             "clover.rope.dimension_count must be even and at most clover.attention.key_length");
        need(std::isfinite(hp.rope_base) && hp.rope_base > 0, "clover.rope.freq_base must be a positive number");
    }
    if (any_gdn) {
        need(hp.hk > 0 && hp.hv > 0 && hp.dk > 0 && hp.hv % hp.hk == 0,
             "clover.ssm.time_step_rank must be a positive multiple of clover.ssm.group_count, state_size positive");
        if (hp.dk != hp.dv) throw load_error("GDN key and value head dims must be equal (ggml_gated_delta_net)");
        if (hp.conv_k < 2) throw load_error("clover.ssm.conv_kernel must be >= 2");
    }
    if (hp.n_expert) {
        need(hp.n_expert_used > 0 && hp.n_expert_used <= hp.n_expert && hp.n_ff_exp > 0 && hp.n_ff_shexp > 0,
             "clover.expert_used_count must lie in [1, expert_count]; the expert widths must be positive");
    } else {
        need(hp.n_ff > 0, "clover.feed_forward_length must be positive for a dense feed-forward");
    }
}

// a weight matrix may be stored in any of the types `clover export gguf` writes; every other
// tensor (norms, gates' vectors, convolutions, per-head parameters) is f32, which the graph's
// element-wise ops need
enum kind { VECTOR, MATRIX };

struct binder {
    clover_model & m;
    std::set<std::string> bound;

    ggml_tensor * operator()(const std::string & name, std::vector<int64_t> ne, kind k = VECTOR) {
        ggml_tensor * t = ggml_get_tensor(m.weights, name.c_str());
        if (!t) throw load_error("missing tensor " + name);
        std::string want, got;
        for (size_t d = 0; d < GGML_MAX_DIMS; d++) {
            int64_t w = d < ne.size() ? ne[d] : 1;
            want += (d ? ", " : "") + std::to_string(w);
            got += (d ? ", " : "") + std::to_string(t->ne[d]);
        }
        if (want != got) throw load_error("tensor " + name + " has shape [" + got + "], the config needs [" + want + "]");
        ggml_type ty = t->type;
        bool ok = ty == GGML_TYPE_F32 ||
                  (k == MATRIX && (ty == GGML_TYPE_F16 || ty == GGML_TYPE_Q8_0 || ty == GGML_TYPE_Q4_K));
        if (!ok)
            throw load_error("tensor " + name + " has type " + ggml_type_name(ty) + "; the graph takes " +
                             (k == MATRIX ? "f32, f16, q8_0 or q4_k" : "f32") + " for it");
        bound.insert(name);
        return t;
    }
};

void bind_attention(binder & b, clover_layer & L, const std::string & p) {
    const clover_hparams & h = b.m.hp;
    int64_t H = h.n_embd, D = h.head_dim;
    L.wq = b(p + "attn_q.weight", {H, 2 * D * h.n_head}, MATRIX);
    L.wk = b(p + "attn_k.weight", {H, D * h.n_head_kv}, MATRIX);
    L.wv = b(p + "attn_v.weight", {H, D * h.n_head_kv}, MATRIX);
    L.wo = b(p + "attn_output.weight", {D * h.n_head, H}, MATRIX);
    L.q_norm = b(p + "attn_q_norm.weight", {D});
    L.k_norm = b(p + "attn_k_norm.weight", {D});
}

void bind_gdn(binder & b, clover_layer & L, const std::string & p) {
    const clover_hparams & h = b.m.hp;
    int64_t H = h.n_embd, C = h.conv_dim(), HV = h.hv;
    L.qkv = b(p + "attn_qkv.weight", {H, C}, MATRIX);
    L.z = b(p + "attn_gate.weight", {H, HV * h.dv}, MATRIX);
    L.beta = b(p + "ssm_beta.weight", {H, HV});
    L.alpha = b(p + "ssm_alpha.weight", {H, HV});
    L.conv = b(p + "ssm_conv1d.weight", {C, h.conv_k});
    L.conv_right = b(p + "ssm_conv_right.weight", {C, h.conv_k - 1});
    L.dt_bias = b(p + "ssm_dt.bias", {HV});
    L.a = b(p + "ssm_a", {HV});
    L.ssm_norm = b(p + "ssm_norm.weight", {h.dv});
    L.ssm_out = b(p + "ssm_out.weight", {HV * h.dv, H}, MATRIX);
    L.mix_scale = b(p + "ssm_mix_scale", {HV});
    L.mem_key = b(p + "ssm_mem_key", {h.dk, HV});
    L.mem_bias = b(p + "ssm_mem_bias", {HV});
    L.mem_gamma = b(p + "ssm_mem_gamma", {HV});
    L.mem_scale = b(p + "ssm_mem_scale", {HV});
}

void bind_ffn(binder & b, clover_layer & L, const std::string & p) {
    const clover_hparams & h = b.m.hp;
    int64_t H = h.n_embd;
    if (h.n_expert == 0) {
        int64_t I = h.n_ff;
        L.ffn_gate = b(p + "ffn_gate.weight", {H, I}, MATRIX);
        L.ffn_up = b(p + "ffn_up.weight", {H, I}, MATRIX);
        L.ffn_down = b(p + "ffn_down.weight", {I, H}, MATRIX);
        return;
    }
    int64_t E = h.n_expert, I = h.n_ff_exp, S = h.n_ff_shexp;
    L.router = b(p + "ffn_gate_inp.weight", {H, E});
    L.gate_exps = b(p + "ffn_gate_exps.weight", {H, I, E}, MATRIX);
    L.up_exps = b(p + "ffn_up_exps.weight", {H, I, E}, MATRIX);
    L.down_exps = b(p + "ffn_down_exps.weight", {I, H, E}, MATRIX);
    L.gate_sh = b(p + "ffn_gate_shexp.weight", {H, S}, MATRIX);
    L.up_sh = b(p + "ffn_up_shexp.weight", {H, S}, MATRIX);
    L.down_sh = b(p + "ffn_down_shexp.weight", {S, H}, MATRIX);
    L.gate_inp_sh = b(p + "ffn_gate_inp_shexp.weight", {H});
}

void bind_tensors(clover_model & m) {
    const clover_hparams & h = m.hp;
    binder b{m, {}};
    m.tok_embd = b("token_embd.weight", {h.n_embd, h.n_vocab}, MATRIX);
    m.out_norm = b("output_norm.weight", {h.n_embd});
    m.output = b("output.weight", {h.n_embd, h.n_vocab}, MATRIX);
    for (int64_t i = 0; i < h.n_layer; i++) {
        clover_layer L;
        std::string p = "blk." + std::to_string(i) + ".";
        L.attn_norm = b(p + "attn_norm.weight", {h.n_embd});
        L.post_norm = b(p + "post_attention_norm.weight", {h.n_embd});
        if (h.is_attn[i]) bind_attention(b, L, p);
        else bind_gdn(b, L, p);
        bind_ffn(b, L, p);
        m.layers.push_back(L);
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(m.gguf); i++) {
        std::string name = gguf_get_tensor_name(m.gguf, i);
        if (!b.bound.count(name)) throw load_error("unexpected tensor " + name + " (the config has no place for it)");
    }
}

// the tensors' data, mapped read-only from the file: each tensor's bytes must lie inside it
void map_weights(clover_model & m, const char * path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw load_error("cannot open the file");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        throw load_error("cannot stat the file");
    }
    size_t size = (size_t) st.st_size, base = gguf_get_data_offset(m.gguf);
    for (int64_t i = 0; i < gguf_get_n_tensors(m.gguf); i++) {
        size_t end = base + gguf_get_tensor_offset(m.gguf, i) + gguf_get_tensor_size(m.gguf, i);
        if (end > size) {
            close(fd);
            throw load_error("tensor " + std::string(gguf_get_tensor_name(m.gguf, i)) + " ends at byte " +
                             std::to_string(end) + " but the file has " + std::to_string(size) + " (truncated?)");
        }
    }
    if (size > 0) {
        void * p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            throw load_error("cannot map the file into memory");
        }
        m.map = p;
        m.map_size = size;
    }
    close(fd);  // the mapping stays valid without the descriptor
    for (int64_t i = 0; i < gguf_get_n_tensors(m.gguf); i++) {
        ggml_tensor * t = ggml_get_tensor(m.weights, gguf_get_tensor_name(m.gguf, i));
        if (t) t->data = (char *) m.map + base + gguf_get_tensor_offset(m.gguf, i);
    }
}

// gguf reports why it refused a file through ggml's log; while a file loads, the error lines are
// kept for the message instead of printed
thread_local std::string * g_log_sink = nullptr;

void log_to_sink(ggml_log_level level, const char * text, void *) {
    if (g_log_sink && (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_CONT)) {
        if (!g_log_sink->empty() && level == GGML_LOG_LEVEL_ERROR) *g_log_sink += "; ";
        *g_log_sink += text;
        while (!g_log_sink->empty() && g_log_sink->back() == '\n') g_log_sink->pop_back();
    } else if (!g_log_sink && level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

}  // namespace

void clover_load(clover_model & m, const char * path) {
    std::string log;
    ggml_log_set(log_to_sink, nullptr);
    g_log_sink = &log;
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/&m.weights};
    m.gguf = gguf_init_from_file(path, params);
    g_log_sink = nullptr;
    if (!m.gguf) {
        // the first of gguf's lines says why (the last only that it gave up)
        std::string why = log.substr(0, log.find("; "));
        throw load_error("not a readable GGUF file" + (why.empty() ? std::string() : " (" + why + ")"));
    }
    if (!m.weights) throw load_error("cannot allocate the tensor table");
    read_hparams(m.gguf, m.hp);
    bind_tensors(m);
    map_weights(m, path);
}
