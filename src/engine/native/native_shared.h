// What the addon's two classes share (the draft Engine, draft_engine.h, and generate's Target,
// src/generate/native/target.cpp): llama.cpp's logging and backend set-up, the llama.cpp objects each owns
// (LlamaHandles), the greedy argmax and the guarded read of many output rows, timing, and the readers of an options
// object that load() takes (every field required: the defaults live in TypeScript).
#pragma once

#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

namespace specdraft {

// ---- logging: keep llama.cpp's error lines for our error messages; print everything only when verbose ----

// one log for the whole addon (inline: a single definition across the translation units)
inline std::mutex g_log_mutex;
inline std::string g_log_errors;
inline bool g_log_verbose = false;

inline void logCallback(ggml_log_level level, const char* text, void*) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level == GGML_LOG_LEVEL_ERROR) {
        if (g_log_errors.size() < 4096) g_log_errors += text;
    }
    if (g_log_verbose) fputs(text, stderr);
}

inline void setVerbose(bool verbose) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_verbose = verbose;
}

// llama.cpp's error lines since the last call, as one line (the CLI prints the message as a single line).
inline std::string takeLoggedErrors() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string errors;
    errors.swap(g_log_errors);
    for (char& c : errors) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    while (!errors.empty() && errors.back() == ' ') errors.pop_back();
    return errors;
}

// llama.cpp's logged errors, or a hint where it logged none.
inline std::string orUnknown(std::string s) { return s.empty() ? "unknown reason (run with verbose logs)" : s; }

inline std::once_flag g_backend_once;

inline void initBackends(const std::string& binsDir) {
    std::call_once(g_backend_once, [&]() {
        llama_log_set(logCallback, nullptr);
        // Builds with GGML_BACKEND_DL (node-llama-cpp's prebuilt binaries) register no backend until the backend
        // libraries (e.g. the best libggml-cpu-<cpu>.so) are loaded from their folder; builds that link their
        // backends register them statically, and loading them again would duplicate devices.
        if (ggml_backend_dev_count() == 0 && !binsDir.empty()) ggml_backend_load_all_from_path(binsDir.c_str());
        llama_backend_init();
    });
}

// `CUDA:NVIDIA H200` for the first GPU device llama.cpp registered, empty when it computes on the CPU (gpuLayers 0).
inline std::string gpuDeviceName(int32_t gpuLayers) {
    if (gpuLayers == 0) return "";
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            return std::string(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev))) + ":" + ggml_backend_dev_description(dev);
        }
    }
    return "";
}

// ---- argmax ----

// First index of the largest logit, like llama.cpp's greedy sampler.
inline llama_token argmax(const float* logits, int32_t nVocab) {
    int32_t best = 0;
    float bestValue = logits[0];
    for (int32_t i = 1; i < nVocab; ++i) {
        if (logits[i] > bestValue) {
            bestValue = logits[i];
            best = i;
        }
    }
    return best;
}

// Runs fn(0..count-1) over up to maxThreads threads (the calling thread included).
template <typename Fn>
void parallelFor(int32_t count, int32_t maxThreads, Fn fn) {
    const int32_t nThreads = std::max(1, std::min(count, maxThreads));
    if (nThreads == 1) {
        for (int32_t i = 0; i < count; ++i) fn(i);
        return;
    }
    std::vector<std::thread> threads;
    threads.reserve(nThreads - 1);
    for (int32_t t = 1; t < nThreads; ++t) {
        threads.emplace_back([=]() {
            for (int32_t i = t; i < count; i += nThreads) fn(i);
        });
    }
    for (int32_t i = 0; i < count; i += nThreads) fn(i);
    for (auto& th : threads) th.join();
}

// Threads for the host argmax: up to 8, one per core.
inline int32_t hostArgmaxThreads() { return (int32_t)std::min(8u, std::max(1u, std::thread::hardware_concurrency())); }

// The greedy next token of each output `indices[k]` of the last decode, into next[first + k], by an argmax over its
// logits. Correctness guard: llama.cpp reorders the logits buffer lazily, on the first logits access after a decode
// (llama_context::output_reorder); touching the logits from several threads at once races on that reorder and gives
// wrong, run-to-run different tokens. So every row is fetched on this thread first (the first fetch reorders), and
// only then is the argmax split over threads (below ~1M logits one thread is faster than starting more).
inline void argmaxOfRows(llama_context* ctx, const std::vector<int32_t>& indices, int32_t nVocab, int32_t maxThreads,
                         std::vector<llama_token>& next, size_t first) {
    const int32_t count = (int32_t)indices.size();
    std::vector<const float*> rows(count);
    for (int32_t k = 0; k < count; ++k) {
        rows[k] = llama_get_logits_ith(ctx, indices[k]);
        if (!rows[k]) throw std::runtime_error("llama.cpp returned no logits for an output");
    }
    if (next.size() < first + count) next.resize(first + count);
    const int32_t threads = (int64_t)count * nVocab >= (1 << 20) ? maxThreads : 1;
    parallelFor(count, threads, [&](int32_t k) { next[first + k] = argmax(rows[k], nVocab); });
}

// The token llama.cpp's backend sampler chose for output `index` of the last decode (each call applies any pending
// output reorder first, on the calling thread).
inline llama_token sampledToken(llama_context* ctx, int32_t index) {
    const llama_token token = llama_get_sampled_token_ith(ctx, index);
    if (token == LLAMA_TOKEN_NULL) throw std::runtime_error("llama.cpp returned no sampled token: " + takeLoggedErrors());
    return token;
}

// llama_decode, or a runtime_error with llama.cpp's logged reason.
inline void decodeOrThrow(llama_context* ctx, const llama_batch& batch) {
    const int32_t rc = llama_decode(ctx, batch);
    if (rc != 0) throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + "): " + takeLoggedErrors());
}

// ---- the llama.cpp objects each class owns ----

// A model, its context and one batch as large as the context takes in one llama_decode: the draft Engine's state and
// generate's Target each hold one, created with their own context parameters. A failed step throws with llama.cpp's
// logged reason; release() frees what exists (the context before its model) and may be called at any point.
struct LlamaHandles {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    llama_batch batch{};
    int32_t batchCapacity = 0;
    int32_t nVocab = 0;

    void loadModel(const std::string& path, int32_t gpuLayers) {
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = gpuLayers;
        model = llama_model_load_from_file(path.c_str(), mp);
        if (!model) throw std::runtime_error("llama.cpp could not load the model: " + orUnknown(takeLoggedErrors()));
        nVocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    }

    void createContext(const llama_context_params& params) {
        ctx = llama_init_from_model(model, params);
        if (!ctx) throw std::runtime_error("llama.cpp could not create a context: " + orUnknown(takeLoggedErrors()));
        batchCapacity = (int32_t)llama_n_batch(ctx);  // llama.cpp caps n_batch at n_ctx
        batch = llama_batch_init(batchCapacity, 0, 1);
    }

    void release() {
        if (ctx) llama_free(ctx);
        if (batchCapacity > 0) llama_batch_free(batch);
        if (model) llama_model_free(model);
        ctx = nullptr;
        model = nullptr;
        batchCapacity = 0;
    }
};

// ---- timing ----

using Clock = std::chrono::steady_clock;

inline double msBetween(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---- N-API: options objects and token arrays ----

// Readers of one required field of an options object: a missing field or one of another type is a TypeError
// naming it, never a silent default.
inline Napi::Value getRequired(const Napi::Object& o, const char* key, bool ok(const Napi::Value&), const char* type) {
    Napi::Value v = o.Get(key);
    if (!ok(v)) throw Napi::TypeError::New(o.Env(), std::string("option ") + key + ": expected a " + type);
    return v;
}
inline int32_t getInt(const Napi::Object& o, const char* key) {
    auto isInt = [](const Napi::Value& v) {
        if (!v.IsNumber()) return false;
        const double d = v.As<Napi::Number>().DoubleValue();
        return std::floor(d) == d && d >= INT32_MIN && d <= INT32_MAX;
    };
    return getRequired(o, key, isInt, "32-bit integer").As<Napi::Number>().Int32Value();
}
inline double getNumber(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsNumber(); }, "number").As<Napi::Number>().DoubleValue();
}
inline bool getBool(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsBoolean(); }, "boolean").As<Napi::Boolean>().Value();
}
inline std::string getString(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsString(); }, "string").As<Napi::String>().Utf8Value();
}
// A required integer ≥ `min`: a RangeError naming the option otherwise.
inline int32_t getIntAtLeast(const Napi::Object& o, const char* key, int32_t min) {
    const int32_t value = getInt(o, key);
    if (value < min) {
        throw Napi::RangeError::New(o.Env(), std::string("option ") + key + ": expected ≥ " + std::to_string(min) + ", got " + std::to_string(value));
    }
    return value;
}

// A required flash-attention option, llama.cpp's three choices: "auto" (llama.cpp decides), "on" or "off".
inline llama_flash_attn_type getFlashAttention(const Napi::Object& o, const char* key) {
    const std::string value = getString(o, key);
    if (value == "on") return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    if (value == "off") return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (value == "auto") return LLAMA_FLASH_ATTN_TYPE_AUTO;
    throw Napi::RangeError::New(o.Env(), std::string("option ") + key + ": expected \"auto\", \"on\" or \"off\", got \"" + value + "\"");
}

inline Napi::Int32Array tokensToJs(Napi::Env env, const std::vector<llama_token>& tokens) {
    Napi::Int32Array a = Napi::Int32Array::New(env, tokens.size());
    std::copy(tokens.begin(), tokens.end(), a.Data());
    return a;
}

// The classes the addon exports (module init: addon.cpp).
void registerEngine(Napi::Env env, Napi::Object exports);
void registerTarget(Napi::Env env, Napi::Object exports);

}  // namespace specdraft
