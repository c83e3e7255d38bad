// Clover's block-diffusion model on ggml: the C API that clover/backends/llamacpp.py calls with ctypes.
//
// A model is loaded from a GGUF file written by `clover export gguf`: the file is checked whole
// (keys, every tensor's name, shape, type and extent) before anything runs, and its tensor data
// is mapped, not read. No C++ exception leaves these functions: each returns its error value
// (NULL, -1, 0) and clover_last_error says why. A cache holds one
// sequence's committed history (docs/architecture.md, Caches): per attention layer the keys and
// values of the committed tokens, per GDN layer the recurrent state S (fp32) and the conv tail.
// clover_step runs one pass exactly as CloverForBlockDiffusion.step does: `commit` clean tokens
// (whole blocks, written into the cache) followed by an optional `denoise` block (read-only),
// and writes the denoise block's logits [n_denoise, n_vocab] aligned so that row i predicts
// token i. Functions returning int give 0 on success and -1 on error; clover_last_error tells why.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLOVER_API __attribute__((visibility("default")))

typedef struct clover_model clover_model;
typedef struct clover_cache clover_cache;

// the last error of this thread ("" when none)
CLOVER_API const char * clover_last_error(void);

CLOVER_API clover_model * clover_model_load(const char * path, int n_threads);
CLOVER_API void clover_model_free(clover_model * model);
CLOVER_API void clover_model_set_threads(clover_model * model, int n_threads);
// integer hyper-parameters as the file's GGUF keys give them, by name: "n_vocab", "block_size",
// "max_block_size", "shift_logits", "mask_token_id", "n_layer", "n_embd", "n_head", "n_head_kv",
// "head_dim", "rope_dims", "conv_k", "hk", "hv", "dk", "dv", "n_expert", "n_expert_used", "n_ff",
// "n_ff_exp", "n_ff_shexp", "right_conv", "calibration", "n_attention", "is_attention.<layer>";
// -1 for an unknown name
CLOVER_API int64_t clover_model_get(const clover_model * model, const char * name);
// float hyper-parameters by name: "eps", "rope_base"; NaN for an unknown name
CLOVER_API double clover_model_get_float(const clover_model * model, const char * name);

// a string metadata value of the GGUF file ("clover.config", "tokenizer.huggingface.json", ...);
// NULL when the key is absent or not a string
CLOVER_API const char * clover_model_meta(const clover_model * model, const char * key);

CLOVER_API clover_cache * clover_cache_new(const clover_model * model);
CLOVER_API void clover_cache_free(clover_cache * cache);
CLOVER_API clover_cache * clover_cache_copy(const clover_cache * cache);
CLOVER_API int64_t clover_cache_length(const clover_cache * cache);
// bytes the cache holds (keys, values, states, conv tails and the kept logit)
CLOVER_API int64_t clover_cache_nbytes(const clover_cache * cache);

// one pass: commit [n_commit] then denoise [n_denoise] tokens; logits may be NULL when
// n_denoise is 0, else it holds n_denoise * n_vocab floats
CLOVER_API int clover_step(clover_model * model, clover_cache * cache, const int32_t * commit, int64_t n_commit,
                           const int32_t * denoise, int64_t n_denoise, int64_t block_size, float * logits);

// the policies the block loop below implements (clover/engine/policies.py)
enum { CLOVER_POLICY_AR = 0, CLOVER_POLICY_PREFIX = 1, CLOVER_POLICY_THRESHOLD = 2 };

// one block decoded to its end, greedily, with no return to the caller between passes: the first
// pass commits `commit` (whole blocks; n_commit may be 0) and denoises the block x [n], each later
// pass denoises x. After each pass every open position needed gets the most likely token other
// than the mask token (its probability, without the mask token, is the confidence) and the policy
// chooses which to commit: AR the leftmost, PREFIX the leftmost and each next while its
// confidence >= threshold, THRESHOLD each >= threshold (else the most confident). The confidence
// is computed in the float32 steps of the engine's sampler (torch's logsumexp), but its sums in
// another order: ranking many confidences (the engine's "fixed") could tie-break otherwise, so
// that policy is not here. open [n]: 1 where x holds a mask still to fill; wanted [n]: 1 where the request
// needs the position; a wanted position after a committed token of stop [n_stop] is not needed.
// The loop ends when no needed position is open. x is updated in place, pass_of [n] gets the pass
// (0-based) that committed each position (-1: none this call). Returns the passes run, -1 on error;
// compute_s (may be NULL) gets the calling thread's CPU seconds in the passes themselves (with one
// thread, all of ggml's work; the rest of the call is the loop's own).
CLOVER_API int clover_denoise_block(clover_model * model, clover_cache * cache, const int32_t * commit,
                                    int64_t n_commit, int32_t * x, const uint8_t * open, const uint8_t * wanted,
                                    int64_t n, int64_t block_size, const int32_t * stop, int64_t n_stop, int policy,
                                    float threshold, int32_t * pass_of, double * compute_s);

// ggml's quantizer: nrows rows of n_per_row floats into dst (type by name: "q4_k", "q8_0", ...);
// returns the bytes written, 0 on error
CLOVER_API size_t clover_quantize(const char * type, const float * src, void * dst, int64_t nrows,
                                  int64_t n_per_row);
// bytes that clover_quantize writes for nrows rows; 0 for an unknown type or a bad row length
CLOVER_API size_t clover_quantized_size(const char * type, int64_t nrows, int64_t n_per_row);

#ifdef __cplusplus
}
#endif
