// A block's denoising loop in the library (clover_denoise_block, clover.h): the passes of one block,
// the greedy choice of a token per open position, the policy's choice of positions to commit and the
// commit, run here with no return to Python between passes. It restates the engine's Python loop
// for the requests it covers (clover/engine/engine.py Engine._denoise, sampler.choose_selected,
// policies.py, batch.py Batch.apply and refresh_need), which stays the reference.
#include "clover_impl.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <time.h>

namespace {

double thread_seconds() {  // this thread's CPU time (ggml computes on the calling thread, and on its workers)
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

// sampler.choose_selected, greedy: the most likely token other than the mask token (the first on
// ties, as torch's max) and its probability under the softmax without the mask token, in torch's
// float32 steps (logsumexp: the max, plus the log of the sum of exp(x - max), the sum rounded to
// float once; then exp(max - lse)), so that ties and thresholds fall as in the engine's sampler
void choose(const float * row, int64_t V, int64_t mask_id, int32_t * tok, float * conf) {
    int64_t best = -1;
    float top = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (v != mask_id && (best < 0 || row[v] > top)) best = v, top = row[v];
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++)
        if (v != mask_id) sum += (double) std::exp(row[v] - top);
    float lse = std::log((float) sum) + top;
    *tok = (int32_t) best;
    *conf = std::exp(top - lse);
}

// one pass's tokens and confidences, each computed when a policy first reads it: a policy that
// stops early (AR after its one position, PREFIX at the first unsure one) computes no more
struct choices {
    const float * logits;
    int64_t V, mask_id;
    std::vector<int32_t> tok;
    std::vector<float> conf;
    std::vector<char> done;
    void reset(const float * l, int64_t n) {
        logits = l;
        tok.assign(n, 0);
        conf.assign(n, -1.0f);
        done.assign(n, 0);
    }
    float at(int64_t i) {
        if (!done[i]) choose(logits + i * V, V, mask_id, &tok[i], &conf[i]), done[i] = 1;
        return conf[i];
    }
};

// policies.py: which of the open positions `cand` to commit this pass
void policy_commit(int policy, const std::vector<char> & cand, choices & ch, float tau, std::vector<char> & commit) {
    int64_t n = (int64_t) cand.size();
    std::fill(commit.begin(), commit.end(), 0);
    if (policy == CLOVER_POLICY_AR) {  // AR: the leftmost open position
        for (int64_t i = 0; i < n; i++)
            if (cand[i]) {
                ch.at(i);
                commit[i] = 1;
                break;
            }
    } else if (policy == CLOVER_POLICY_PREFIX) {  // Prefix (run_from_first): the leftmost open one, then each next while sure
        bool first = true;
        for (int64_t i = 0; i < n; i++) {
            if (!cand[i]) continue;  // positions already set (or not needed) do not break the run
            if (!(ch.at(i) >= tau) && !first) break;
            commit[i] = 1;
            first = false;
        }
    } else {  // Threshold: every sure one, else the most confident (leftmost on ties)
        int64_t best = -1;
        bool any = false;
        for (int64_t i = 0; i < n; i++) {
            if (!cand[i]) continue;
            float c = ch.at(i);
            if (c >= tau) commit[i] = 1, any = true;
            if (best < 0 || c > ch.conf[best]) best = i;
        }
        if (!any && best >= 0) commit[best] = 1;
    }
}

// Batch.refresh_need: a wanted position is needed unless a stop token is committed before it
void open_needed(const int32_t * x, const std::vector<char> & open, const uint8_t * wanted, const int32_t * stop,
                 int64_t n_stop, std::vector<char> & cand) {
    bool after_stop = false;
    for (size_t i = 0; i < open.size(); i++) {
        cand[i] = open[i] && wanted[i] && !after_stop;
        if (!open[i] && wanted[i] && std::find(stop, stop + n_stop, x[i]) != stop + n_stop) after_stop = true;
    }
}

int denoise_block(clover_model * m, clover_cache * c, const int32_t * commit, int64_t n_c, int32_t * x,
                  const uint8_t * open_in, const uint8_t * wanted, int64_t n, int64_t bs, const int32_t * stop,
                  int64_t n_stop, int policy, float tau, int32_t * pass_of, double * compute_s) {
    if (policy < CLOVER_POLICY_AR || policy > CLOVER_POLICY_THRESHOLD) {
        clover_set_error("clover_denoise_block: unknown policy " + std::to_string(policy));
        return -1;
    }
    if (n <= 0 || n_stop < 0) {
        clover_set_error("clover_denoise_block: a block of " + std::to_string(n) + " positions and " +
                         std::to_string(n_stop) + " stop tokens");
        return -1;
    }
    std::string problem = clover_check_pass(*m, *c, commit, n_c, x, n, bs);
    if (!problem.empty()) {
        clover_set_error(problem);
        return -1;
    }
    const int64_t V = m->hp.n_vocab, mask_id = m->hp.mask_token_id;
    std::vector<char> open(open_in, open_in + n), cand(n), commit_now(n);
    std::vector<float> logits((size_t) (n * V));
    choices ch{logits.data(), V, mask_id, {}, {}, {}};
    std::fill(pass_of, pass_of + n, -1);
    double computing = 0.0;
    clover_built_pass pass;
    int passes = 0;
    for (;; passes++) {
        open_needed(x, open, wanted, stop, n_stop, cand);
        if (std::find(cand.begin(), cand.end(), 1) == cand.end()) break;  // the block is final
        if (passes > n) throw std::runtime_error("the block loop did not finish");  // every pass commits one at least
        bool commits = passes == 0 && n_c > 0;
        if (passes == 0 || (passes == 1 && n_c > 0)) pass.build(*m, *c, commits ? n_c : 0, n, bs);  // then reused
        double t0 = thread_seconds();
        pass.run(*m, *c, commits ? commit : nullptr, x, logits.data());
        computing += thread_seconds() - t0;
        ch.reset(logits.data(), n);
        policy_commit(policy, cand, ch, tau, commit_now);
        for (int64_t i = 0; i < n; i++)
            if (commit_now[i]) x[i] = ch.tok[i], open[i] = 0, pass_of[i] = passes;  // Batch.apply
    }
    if (compute_s) *compute_s = computing;
    return passes;
}

}  // namespace

int clover_denoise_block(clover_model * m, clover_cache * c, const int32_t * commit, int64_t n_commit, int32_t * x,
                         const uint8_t * open, const uint8_t * wanted, int64_t n, int64_t block_size,
                         const int32_t * stop, int64_t n_stop, int policy, float threshold, int32_t * pass_of,
                         double * compute_s) {
    if (!m || !c || (n_commit > 0 && !commit) || !x || !open || !wanted || (n_stop > 0 && !stop) || !pass_of) {
        clover_set_error("clover_denoise_block: a null model, cache or buffer");
        return -1;
    }
    return guard<int>(-1, [&] {
        return denoise_block(m, c, commit, n_commit, x, open, wanted, n, block_size, stop, n_stop, policy, threshold,
                             pass_of, compute_s);
    });
}
