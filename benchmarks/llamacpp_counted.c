/* llama.cpp's side of benchmarks/llm_per_core.py: one prompt in one llama_decode, then greedy decode
 * steps, each window marked for edgekit's instruction-counting QEMU plugin exactly as edgekit-run
 * generate marks its own (edgekit/native/runner/timing.h): write(-1, NULL, mark), EBADF at once.
 *
 *   llamacpp_counted MODEL.gguf STEPS ID,ID,...     (1 thread, KV cache of 256 positions)
 *
 * Prints one line: the greedy ids (the prompt's pick, then one per decode step). Linked statically
 * against libllama + libggml cross-built for the core (see llm_per_core.py's docstring).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "llama.h"

#define MARK_BEGIN 0x65646b62u         /* the decode steps */
#define MARK_END 0x65646b65u
#define MARK_PREFILL_BEGIN 0x65646b70u /* the prompt */
#define MARK_PREFILL_END 0x65646b71u
#define CONTEXT 256
#define MAX_IDS CONTEXT

static void mark(uint32_t value) { (void)syscall(SYS_write, -1L, NULL, (size_t)value); }

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void)data;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static llama_token greedy(struct llama_context *ctx, int32_t vocab) {
    const float *logits = llama_get_logits_ith(ctx, -1);
    llama_token best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int parse_ids(const char *text, llama_token *ids, int most) {
    int n = 0;
    while (*text) {
        char *end = NULL;
        long value = strtol(text, &end, 10);
        if (end == text || value < 0 || value > INT32_MAX || n == most) return -1;
        if (*end && *end != ',') return -1;
        ids[n++] = (llama_token)value;
        text = *end ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf STEPS ID,ID,...\n", argv[0]);
        return 2;
    }
    int steps = atoi(argv[2]);
    llama_token prompt[MAX_IDS];
    int n_prompt = parse_ids(argv[3], prompt, MAX_IDS);
    if (steps < 1 || n_prompt < 1 || n_prompt + steps > CONTEXT) {
        fprintf(stderr, "Error: need 1 <= STEPS and 1 <= prompt ids, together within %d\n", CONTEXT);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mparams = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mparams);
    if (!model) {
        fprintf(stderr, "Error: cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = CONTEXT;
    cparams.n_threads = cparams.n_threads_batch = 1;
    cparams.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cparams);
    if (!ctx) {
        fprintf(stderr, "Error: cannot make a context\n");
        return 1;
    }
    int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n_prompt; i++) {
        if (prompt[i] >= vocab) {
            fprintf(stderr, "Error: id %d is outside the vocabulary (%d)\n", prompt[i], vocab);
            return 2;
        }
    }

    llama_token out[MAX_IDS];
    mark(MARK_PREFILL_BEGIN);
    int failed = llama_decode(ctx, llama_batch_get_one(prompt, n_prompt));
    if (!failed) out[0] = greedy(ctx, vocab);
    mark(MARK_PREFILL_END);
    mark(MARK_BEGIN);
    for (int i = 0; i < steps && !failed; i++) {
        failed = llama_decode(ctx, llama_batch_get_one(&out[i], 1));
        if (!failed) out[i + 1] = greedy(ctx, vocab);
    }
    mark(MARK_END);
    if (failed) {
        fprintf(stderr, "Error: llama_decode failed (%d)\n", failed);
        return 1;
    }
    for (int i = 0; i <= steps; i++) printf("%s%d", i ? "," : "", out[i]);
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
