/* llama.cpp's own quantizer (llama_model_quantize, as llama-quantize calls it) for
 * benchmarks/llm_per_core.py, without building llama.cpp's common library and tools:
 *
 *   llamacpp_quantize IN.gguf OUT.gguf Q4_0|Q8_0|Q4_K_M      (re-quantizes: allow_requantize)
 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    static const struct { const char *name; enum llama_ftype ftype; } TYPES[] = {
        {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
        {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}};
    if (argc != 4) {
        fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE\n", argv[0]);
        return 2;
    }
    struct llama_model_quantize_params params = llama_model_quantize_default_params();
    params.allow_requantize = true;
    params.ftype = (enum llama_ftype)-1;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (strcmp(argv[3], TYPES[i].name) == 0) params.ftype = TYPES[i].ftype;
    if ((int)params.ftype == -1) {
        fprintf(stderr, "Error: unknown type %s (Q4_0, Q4_1, Q8_0, Q4_K_M)\n", argv[3]);
        return 2;
    }
    llama_backend_init();
    uint32_t failed = llama_model_quantize(argv[1], argv[2], &params);
    llama_backend_free();
    if (failed) fprintf(stderr, "Error: llama_model_quantize failed (%u)\n", failed);
    return failed ? 1 : 0;
}
