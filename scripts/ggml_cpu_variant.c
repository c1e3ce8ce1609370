// Pins llama.cpp's CPU backend to one of node-llama-cpp's prebuilt variants, for tests and for reproducing CI on a
// CPU of another kind. Built as an LD_PRELOAD library (scripts/with-cpu-variant.sh and train/tests/ggml_cpu.py build
// it with `cc -shared -fPIC -O2 -o ggml_cpu_variant.so scripts/ggml_cpu_variant.c -ldl`).
//
// node-llama-cpp's binaries (and specdraft's native engine) call ggml_backend_load_all_from_path(binsDir), which
// loads the best-scoring libggml-cpu-<variant>.so the CPU can run. With SPECDRAFT_GGML_CPU_VARIANT=<variant> set,
// this interposed definition loads only binsDir/libggml-cpu-<variant>.so instead; without it, it forwards to ggml.
// A variant the CPU cannot run (or a missing file) is an error: the process exits with status 3 and says why, rather
// than fall back to another variant and measure the wrong path.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*load_all_fn)(const char* dir);
typedef void* (*load_fn)(const char* path);
typedef int (*score_fn)(void);

// The real libggml is loaded as a dependency of a RTLD_LOCAL addon, so RTLD_NEXT cannot see it: find the loaded
// object whose name starts with "libggml." (libggml.v0.4.0.so in node-llama-cpp 3.21.1) and look the symbol up there.
static int find_ggml(struct dl_phdr_info* info, size_t size, void* data) {
    (void)size;
    const char* slash = strrchr(info->dlpi_name, '/');
    const char* base = slash ? slash + 1 : info->dlpi_name;
    if (strncmp(base, "libggml.", 8) == 0) {
        *(void**)data = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        return *(void**)data != NULL;
    }
    return 0;
}

static void* ggml_symbol(const char* name) {
    void* handle = NULL;
    dl_iterate_phdr(find_ggml, &handle);
    void* symbol = handle ? dlsym(handle, name) : NULL;
    if (!symbol) {
        fprintf(stderr, "ggml_cpu_variant: %s not found in a loaded libggml\n", name);
        exit(3);
    }
    return symbol;
}

void ggml_backend_load_all_from_path(const char* dir) {
    const char* variant = getenv("SPECDRAFT_GGML_CPU_VARIANT");
    if (!variant || !*variant || !dir) {
        ((load_all_fn)ggml_symbol("ggml_backend_load_all_from_path"))(dir);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, variant);
    void* library = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    score_fn score = library ? (score_fn)dlsym(library, "ggml_backend_score") : NULL;
    if (!score || score() == 0) {
        fprintf(stderr, "ggml_cpu_variant: %s %s\n", path, score ? "needs instructions this CPU lacks" : "is missing");
        exit(3);
    }
    if (!((load_fn)ggml_symbol("ggml_backend_load"))(path)) {
        fprintf(stderr, "ggml_cpu_variant: ggml could not load %s\n", path);
        exit(3);
    }
}
