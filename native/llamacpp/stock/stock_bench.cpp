// Stock llama.cpp's pass cost and one-token decoding for `clover bench llama.cpp` (docs/llama-cpp.md):
// the same-shape autoregressive model (a Qwen3.5-MoE GGUF written by convert_hf_to_gguf.py) through
// libllama, batch 1. After a history of H tokens: the median time of one B-token pass (logits at
// every position, as Clover's denoise pass computes them) for each B, and one-token decoding
// (N steps after the history). Prints one JSON object.
//
//   clover-stock-bench MODEL.gguf THREADS HISTORY REPS N B1 [B2 ...]
//   clover-stock-bench --quantize IN.gguf OUT.gguf q8_0|q4_k   (llama.cpp's quantizer, every matrix
//                                                             at the type as Clover's export does: `pure`)
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level, const char *, void *) {}

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static int decode(llama_context * ctx, const std::vector<llama_token> & toks, int pos0, bool all_logits) {
    llama_batch b = llama_batch_init((int) toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + (int) i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i + 1 == toks.size();
    }
    b.n_tokens = (int) toks.size();
    int rc = llama_decode(ctx, b);
    llama_synchronize(ctx);
    llama_batch_free(b);
    return rc;
}

static int quantize(const char * in, const char * out, const char * type) {
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    std::string t(type);
    if (t == "q8_0") qp.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    else if (t == "q4_k") qp.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_S;
    else { fprintf(stderr, "unknown type %s (q8_0, q4_k)\n", type); return 2; }
    qp.nthread = 1;
    qp.pure = true;
    return llama_model_quantize(in, out, &qp) ? 1 : 0;
}

int main(int argc, char ** argv) {
    if (argc == 5 && std::string(argv[1]) == "--quantize") {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
        return quantize(argv[2], argv[3], argv[4]);
    }
    if (argc < 7) {
        fprintf(stderr, "usage: %s MODEL.gguf THREADS HISTORY REPS N B1 [B2 ...]\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[2]), history = atoi(argv[3]), reps = atoi(argv[4]), n_gen = atoi(argv[5]);
    std::vector<int> sizes;
    for (int i = 6; i < argc; i++) sizes.push_back(atoi(argv[i]));
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int max_b = *std::max_element(sizes.begin(), sizes.end());
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = history + std::max(max_b, n_gen) + 16;
    cp.n_batch = cp.n_ubatch = std::max(history, max_b) + 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context\n"); return 1; }
    std::mt19937 rng(0);
    auto draw = [&](int n) {
        std::vector<llama_token> t(n);
        for (auto & x : t) x = (llama_token) (rng() % n_vocab);
        return t;
    };
    auto restart = [&]() {
        llama_memory_clear(llama_get_memory(ctx), true);
        if (history > 0 && decode(ctx, draw(history), 0, false)) { fprintf(stderr, "decode failed\n"); exit(1); }
    };
    printf("{\"pass_ms\": {");
    for (size_t k = 0; k < sizes.size(); k++) {
        std::vector<double> ms;
        for (int r = 0; r < reps + 1; r++) {  // the first run warms up
            restart();
            auto toks = draw(sizes[k]);
            double t0 = now_ms();
            if (decode(ctx, toks, history, true)) { fprintf(stderr, "decode failed\n"); return 1; }
            if (r) ms.push_back(now_ms() - t0);
        }
        std::sort(ms.begin(), ms.end());
        printf("%s\"%d\": %.4f", k ? ", " : "", sizes[k], ms[ms.size() / 2]);
    }
    restart();
    decode(ctx, draw(1), history, false);  // warm up
    double t0 = now_ms();
    for (int i = 0; i < n_gen; i++) decode(ctx, draw(1), history + 1 + i, false);
    double dt = now_ms() - t0;
    printf("}, \"tokens_per_s\": %.3f}\n", n_gen / (dt / 1000.0));
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
