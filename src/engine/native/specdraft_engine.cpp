// specdraft's native draft loop: one llama.cpp context holding many sequences, driven one whole ROUND at a time.
//
// A round takes a set of requests (slot, tokens to keep in the slot's KV cache, new tokens, n, endId) and, off the JS
// thread: trims each slot's KV cache to the kept prefix, evaluates all new tokens in as few llama_decode calls as
// possible (logits only for each request's last token), then runs up to n steps with ONE llama_decode per step for
// all sequences still drafting. The next token of every sequence is the argmax of its logits, computed here, or with
// `backendSampling` by a greedy sampler inside llama.cpp's graph (on the GPU: no logits copied to the host).
//
// Correctness guard: llama.cpp reorders the logits buffer lazily, on the first logits access after a decode
// (llama_context::output_reorder). Touching the logits from several threads at once races on that reorder and gives
// wrong, run-to-run different drafts (node-llama-cpp's per-sequence sampling does exactly that). Here the row pointers
// of all outputs are fetched on one thread first (the first fetch reorders), and only then is argmax split over
// threads. `unguardedLogits` turns the guard off, only so a test can show that it is needed; `arrivalOrder` (also for
// tests) batches requests in arrival order, which makes llama.cpp reorder outputs and so exposes the race.
//
// JS interface (see src/engine/NativeEngine.ts for the typed view):
//   const engine = new Engine();
//   await engine.load({ binsDir, modelPath, streams, contextSize, batchSize, ubatchSize, gpuLayers, flashAttention,
//                       kvUnified, backendSampling, threads, unguardedLogits, arrivalOrder, verbose });
//   engine.info()  -> { vocabSize, contextSizePerSequence, gpuDevice }
//   await engine.round(items, cancelFlags)  -> { drafts, cached, evaluated, decodes }
//   engine.dispose()

#include <napi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

namespace {

// ---- logging: keep llama.cpp's error lines for our error messages; print everything only when verbose ----

std::mutex g_log_mutex;
std::string g_log_errors;
bool g_log_verbose = false;

void logCallback(ggml_log_level level, const char* text, void*) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level == GGML_LOG_LEVEL_ERROR) {
        if (g_log_errors.size() < 4096) g_log_errors += text;
    }
    if (g_log_verbose) fputs(text, stderr);
}

std::string takeLoggedErrors() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string errors;
    errors.swap(g_log_errors);
    // one line: the CLI prints the message as a single line
    for (char& c : errors) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    while (!errors.empty() && errors.back() == ' ') errors.pop_back();
    return errors;
}

std::once_flag g_backend_once;

void initBackends(const std::string& binsDir) {
    std::call_once(g_backend_once, [&]() {
        llama_log_set(logCallback, nullptr);
        // Builds with GGML_BACKEND_DL (node-llama-cpp's prebuilt binaries) register no backend until the backend
        // libraries (e.g. the best libggml-cpu-<cpu>.so) are loaded from their folder; builds that link their
        // backends register them statically, and loading them again would duplicate devices.
        if (ggml_backend_dev_count() == 0 && !binsDir.empty()) ggml_backend_load_all_from_path(binsDir.c_str());
        llama_backend_init();
    });
}

// ---- argmax ----

// First index of the largest logit, like llama.cpp's greedy sampler.
llama_token argmax(const float* logits, int32_t nVocab) {
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

// ---- round data ----

struct RoundItem {
    llama_seq_id slot = 0;
    int32_t keep = 0;                 // tokens of the slot's KV cache to keep (positions [0, keep))
    std::vector<llama_token> tokens;  // new tokens, evaluated at positions keep, keep+1, ...
    int32_t n = 0;                    // tokens to draft
    llama_token endId = -1;           // stop right after this token; -1: none
    // results
    std::vector<llama_token> draft;
    int32_t cached = 0;     // positions now valid in the slot's KV cache
    int32_t evaluated = 0;  // tokens this item put through llama_decode
    bool active = false;    // still drafting
};

struct DecodeStat {
    int32_t tokens;
    int32_t sequences;
};

struct EngineState {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    llama_batch batch{};
    int32_t batchCapacity = 0;
    int32_t nVocab = 0;
    int32_t streams = 0;
    int32_t argmaxThreads = 1;
    bool unguardedLogits = false;
    bool backendSampling = false;  // greedy sampling inside llama.cpp's graph: only token ids leave the device
    std::vector<llama_sampler*> samplers;
    std::vector<llama_sampler_seq_config> samplerConfigs;
    bool arrivalOrder = false;  // tests only: batch in request order (llama.cpp then reorders outputs) instead of slot order
    std::string gpuDevice;  // empty: CPU only
};

class Engine : public Napi::ObjectWrap<Engine> {
public:
    static Napi::Object Init(Napi::Env env, Napi::Object exports);
    explicit Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info) {}
    ~Engine() override { freeState(); }

    EngineState state;
    std::atomic<bool> busy{false};
    bool loaded = false;

    void freeState() {
        if (state.ctx) llama_free(state.ctx);
        if (state.batchCapacity > 0) llama_batch_free(state.batch);
        if (state.model) llama_model_free(state.model);
        for (llama_sampler* smpl : state.samplers) llama_sampler_free(smpl);
        state.samplers.clear();
        state.samplerConfigs.clear();
        state.ctx = nullptr;
        state.model = nullptr;
        state.batchCapacity = 0;
    }

private:
    Napi::Value Load(const Napi::CallbackInfo& info);
    Napi::Value Info(const Napi::CallbackInfo& info);
    Napi::Value Round(const Napi::CallbackInfo& info);
    Napi::Value Dispose(const Napi::CallbackInfo& info);
};

// ---- load ----

struct LoadOptions {
    std::string binsDir;
    std::string modelPath;
    int32_t streams = 1;
    int32_t contextSize = 4096;  // per sequence
    int32_t batchSize = 4096;
    int32_t ubatchSize = 512;
    int32_t gpuLayers = 0;
    bool flashAttention = false;
    bool kvUnified = false;
    int32_t threads = 0;
    bool unguardedLogits = false;
    bool arrivalOrder = false;
    bool backendSampling = false;
};

class LoadWorker : public Napi::AsyncWorker {
public:
    LoadWorker(Napi::Env env, Engine* engine, LoadOptions options)
        : Napi::AsyncWorker(env), engine_(engine), options_(std::move(options)), deferred_(Napi::Promise::Deferred::New(env)) {
        engineRef_ = Napi::Persistent(engine->Value());
    }
    Napi::Promise Promise() { return deferred_.Promise(); }

    void Execute() override {
        try {
            initBackends(options_.binsDir);
            takeLoggedErrors();
            EngineState& s = engine_->state;

            llama_model_params mp = llama_model_default_params();
            mp.n_gpu_layers = options_.gpuLayers;
            s.model = llama_model_load_from_file(options_.modelPath.c_str(), mp);
            if (!s.model) throw std::runtime_error("llama.cpp could not load the model: " + orUnknown(takeLoggedErrors()));

            llama_context_params cp = llama_context_default_params();
            cp.n_seq_max = (uint32_t)options_.streams;
            cp.kv_unified = options_.kvUnified;
            // room for every sequence: split into n_ctx / n_seq_max cells per sequence, or shared when unified
            cp.n_ctx = (uint32_t)options_.contextSize * (uint32_t)options_.streams;
            cp.n_batch = (uint32_t)options_.batchSize;
            cp.n_ubatch = (uint32_t)std::min(options_.ubatchSize, options_.batchSize);
            // at most one output (the last token) per sequence per decode: keeps the logits buffers small
            cp.n_outputs_max = (uint32_t)options_.streams;
            cp.flash_attn_type = options_.flashAttention ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
            cp.no_perf = true;
            if (options_.backendSampling) {
                // one greedy chain per sequence; llama.cpp then computes the argmax in the graph (on the GPU when
                // offloaded) and copies only token ids back instead of n_outputs × n_vocab logits
                for (int32_t seq = 0; seq < options_.streams; ++seq) {
                    llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
                    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
                    s.samplers.push_back(chain);
                    s.samplerConfigs.push_back({seq, chain});
                }
                cp.samplers = s.samplerConfigs.data();
                cp.n_samplers = s.samplerConfigs.size();
                cp.n_outputs_max_per_seq = 1;
                s.backendSampling = true;
            }
            if (options_.threads > 0) {
                cp.n_threads = options_.threads;
                cp.n_threads_batch = options_.threads;
            }
            s.ctx = llama_init_from_model(s.model, cp);
            if (!s.ctx) throw std::runtime_error("llama.cpp could not create a context: " + orUnknown(takeLoggedErrors()));

            s.batchCapacity = (int32_t)llama_n_batch(s.ctx);  // llama.cpp caps n_batch at n_ctx
            s.batch = llama_batch_init(s.batchCapacity, 0, 1);
            s.nVocab = llama_vocab_n_tokens(llama_model_get_vocab(s.model));
            s.streams = options_.streams;
            s.unguardedLogits = options_.unguardedLogits;
            s.arrivalOrder = options_.arrivalOrder;
            const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
            s.argmaxThreads = (int32_t)std::min(8u, hw);

            if (options_.gpuLayers != 0) {
                for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
                    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
                    const auto type = ggml_backend_dev_type(dev);
                    if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                        s.gpuDevice = std::string(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev))) + ":" +
                                      ggml_backend_dev_description(dev);
                        break;
                    }
                }
            }
        } catch (const std::exception& e) {
            engine_->freeState();
            SetError(e.what());
        }
    }
    void OnOK() override {
        engine_->loaded = true;
        deferred_.Resolve(Env().Undefined());
    }
    void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

private:
    static std::string orUnknown(std::string s) { return s.empty() ? "unknown reason (run with verbose logs)" : s; }
    Engine* engine_;
    LoadOptions options_;
    Napi::Promise::Deferred deferred_;
    Napi::ObjectReference engineRef_;
};

int32_t getInt(const Napi::Object& o, const char* key, int32_t fallback) {
    Napi::Value v = o.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().Int32Value() : fallback;
}
bool getBool(const Napi::Object& o, const char* key, bool fallback) {
    Napi::Value v = o.Get(key);
    return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : fallback;
}
std::string getString(const Napi::Object& o, const char* key) {
    Napi::Value v = o.Get(key);
    return v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
}

Napi::Value Engine::Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (loaded || busy.load()) throw Napi::Error::New(env, "engine already loaded");
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "load(options): options object expected");
    Napi::Object o = info[0].As<Napi::Object>();
    LoadOptions opt;
    opt.binsDir = getString(o, "binsDir");
    opt.modelPath = getString(o, "modelPath");
    opt.streams = std::max(1, getInt(o, "streams", 1));
    opt.contextSize = std::max(1, getInt(o, "contextSize", 4096));
    opt.batchSize = std::max(1, getInt(o, "batchSize", 4096));
    opt.ubatchSize = std::max(1, getInt(o, "ubatchSize", 512));
    opt.gpuLayers = getInt(o, "gpuLayers", 0);
    opt.flashAttention = getBool(o, "flashAttention", false);
    opt.kvUnified = getBool(o, "kvUnified", false);
    opt.threads = getInt(o, "threads", 0);
    opt.unguardedLogits = getBool(o, "unguardedLogits", false);
    opt.arrivalOrder = getBool(o, "arrivalOrder", false);
    opt.backendSampling = getBool(o, "backendSampling", false);
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_log_verbose = getBool(o, "verbose", false);
    }
    auto* worker = new LoadWorker(env, this, std::move(opt));
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Engine::Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "engine not loaded");
    Napi::Object o = Napi::Object::New(env);
    o.Set("vocabSize", state.nVocab);
    o.Set("contextSizePerSequence", (double)llama_n_ctx_seq(state.ctx));
    o.Set("gpuDevice", state.gpuDevice);
    return o;
}

// ---- round ----

class RoundWorker : public Napi::AsyncWorker {
public:
    RoundWorker(Napi::Env env, Engine* engine, std::vector<RoundItem> items, Napi::Uint8Array cancel)
        : Napi::AsyncWorker(env), engine_(engine), items_(std::move(items)), deferred_(Napi::Promise::Deferred::New(env)) {
        engineRef_ = Napi::Persistent(engine->Value());
        cancelRef_ = Napi::Persistent(cancel.As<Napi::Object>());
        cancel_ = cancel.Data();
        cancelLength_ = cancel.ElementLength();
    }
    Napi::Promise Promise() { return deferred_.Promise(); }

    void Execute() override {
        try {
            run();
        } catch (const std::exception& e) {
            SetError(e.what());
        }
    }

    void OnOK() override {
        engine_->busy.store(false);
        Napi::Env env = Env();
        Napi::Object result = Napi::Object::New(env);
        Napi::Array drafts = Napi::Array::New(env, items_.size());
        Napi::Array cached = Napi::Array::New(env, items_.size());
        Napi::Array evaluated = Napi::Array::New(env, items_.size());
        for (size_t i = 0; i < items_.size(); ++i) {
            const RoundItem& it = items_[i];
            Napi::Int32Array d = Napi::Int32Array::New(env, it.draft.size());
            std::copy(it.draft.begin(), it.draft.end(), d.Data());
            drafts.Set((uint32_t)i, d);
            cached.Set((uint32_t)i, it.cached);
            evaluated.Set((uint32_t)i, it.evaluated);
        }
        Napi::Int32Array decodes = Napi::Int32Array::New(env, decodes_.size() * 2);
        for (size_t i = 0; i < decodes_.size(); ++i) {
            decodes.Data()[2 * i] = decodes_[i].tokens;
            decodes.Data()[2 * i + 1] = decodes_[i].sequences;
        }
        result.Set("drafts", drafts);
        result.Set("cached", cached);
        result.Set("evaluated", evaluated);
        result.Set("decodes", decodes);
        deferred_.Resolve(result);
    }
    void OnError(const Napi::Error& e) override {
        engine_->busy.store(false);
        deferred_.Reject(e.Value());
    }

private:
    bool cancelled(size_t i) const {
        return i < cancelLength_ && __atomic_load_n(&cancel_[i], __ATOMIC_RELAXED) != 0;
    }

    void addToken(llama_token token, llama_pos pos, llama_seq_id seq, bool logits) {
        llama_batch& b = engine_->state.batch;
        const int32_t i = b.n_tokens;
        b.token[i] = token;
        b.pos[i] = pos;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq;
        b.logits[i] = logits ? 1 : 0;
        b.n_tokens = i + 1;
    }

    // Decodes the batch and returns each output's next token (outputs: batch indices with logits).
    void decode(const std::vector<int32_t>& outputIndices, std::vector<llama_token>& next, int32_t sequences) {
        EngineState& s = engine_->state;
        const int32_t nTokens = s.batch.n_tokens;
        const int32_t rc = llama_decode(s.ctx, s.batch);
        if (rc != 0) {
            throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + "): " + takeLoggedErrors());
        }
        decodes_.push_back({nTokens, sequences});
        next.assign(outputIndices.size(), -1);
        const int32_t count = (int32_t)outputIndices.size();
        // below ~1M logits one thread is faster than starting more
        const int32_t threads = (int64_t)count * s.nVocab >= (1 << 20) ? s.argmaxThreads : 1;
        if (s.backendSampling) {
            // each call synchronizes and applies any pending output reorder first, all on this thread
            for (int32_t k = 0; k < count; ++k) {
                next[k] = llama_get_sampled_token_ith(s.ctx, outputIndices[k]);
                if (next[k] == LLAMA_TOKEN_NULL) throw std::runtime_error("llama.cpp returned no sampled token: " + takeLoggedErrors());
            }
        } else if (s.unguardedLogits) {
            // UNSAFE (tests only): every output fetched from its own thread, as per-sequence samplers do; the first
            // fetch on each thread may run llama.cpp's lazy output reorder concurrently with the others.
            std::atomic<int32_t> ready{0};
            std::vector<std::thread> threadsVec;
            for (int32_t k = 0; k < count; ++k) {
                threadsVec.emplace_back([&, k]() {
                    ready.fetch_add(1);
                    while (ready.load() < count) std::this_thread::yield();
                    const float* row = llama_get_logits_ith(s.ctx, outputIndices[k]);
                    next[k] = row ? argmax(row, s.nVocab) : -1;
                });
            }
            for (auto& th : threadsVec) th.join();
        } else {
            // the guard: fetch every row on this thread (the first fetch applies the pending reorder), then argmax
            std::vector<const float*> rows(count);
            for (int32_t k = 0; k < count; ++k) {
                rows[k] = llama_get_logits_ith(s.ctx, outputIndices[k]);
                if (!rows[k]) throw std::runtime_error("llama.cpp returned no logits for an output");
            }
            parallelFor(count, threads, [&](int32_t k) { next[k] = argmax(rows[k], s.nVocab); });
        }
    }

    void accept(RoundItem& it, llama_token token) {
        it.draft.push_back(token);
        it.active = (int32_t)it.draft.size() < it.n && token != it.endId;
    }

    void run() {
        EngineState& s = engine_->state;
        llama_memory_t mem = llama_get_memory(s.ctx);
        for (RoundItem& it : items_) {
            if (!llama_memory_seq_rm(mem, it.slot, it.keep, -1)) {
                throw std::runtime_error("could not trim the KV cache of sequence " + std::to_string(it.slot));
            }
            it.cached = it.keep;
        }

        // Prefill: all new tokens, packed into as few decodes as the batch size allows. Items are taken in slot
        // order: with per-sequence KV llama.cpp splits a batch into ubatches of consecutive sequence ids.
        std::vector<size_t> order(items_.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        if (!s.arrivalOrder) {
            std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items_[a].slot < items_[b].slot; });
        }
        std::vector<int32_t> outputIndices;
        std::vector<size_t> outputItems;
        std::vector<llama_token> next;
        size_t k = 0;
        size_t offset = 0;
        while (k < order.size()) {
            s.batch.n_tokens = 0;
            outputIndices.clear();
            outputItems.clear();
            int32_t sequences = 0;
            while (k < order.size() && s.batch.n_tokens < s.batchCapacity) {
                RoundItem& it = items_[order[k]];
                if (cancelled(order[k]) || it.tokens.empty() || it.n <= 0) {
                    ++k;
                    offset = 0;
                    continue;
                }
                const size_t take = std::min(it.tokens.size() - offset, (size_t)(s.batchCapacity - s.batch.n_tokens));
                for (size_t j = 0; j < take; ++j) {
                    const size_t t = offset + j;
                    const bool last = t + 1 == it.tokens.size();
                    if (last) {
                        outputIndices.push_back(s.batch.n_tokens);
                        outputItems.push_back(order[k]);
                    }
                    addToken(it.tokens[t], it.keep + (llama_pos)t, it.slot, last);
                }
                ++sequences;
                // an item cut by the batch boundary has its first tokens cached now, its output comes later
                it.cached += (int32_t)take;
                it.evaluated += (int32_t)take;
                offset += take;
                if (offset == it.tokens.size()) {
                    ++k;
                    offset = 0;
                }
            }
            if (s.batch.n_tokens == 0) break;
            decode(outputIndices, next, sequences);
            for (size_t o = 0; o < outputItems.size(); ++o) accept(items_[outputItems[o]], next[o]);
        }

        // Draft steps: one decode per step for every sequence still drafting.
        while (true) {
            s.batch.n_tokens = 0;
            outputIndices.clear();
            outputItems.clear();
            for (size_t idx : order) {
                RoundItem& it = items_[idx];
                if (!it.active) continue;
                if (cancelled(idx)) {
                    it.active = false;
                    continue;
                }
                outputIndices.push_back(s.batch.n_tokens);
                outputItems.push_back(idx);
                addToken(it.draft.back(), it.cached, it.slot, true);
            }
            if (s.batch.n_tokens == 0) break;
            decode(outputIndices, next, s.batch.n_tokens);
            for (size_t o = 0; o < outputItems.size(); ++o) {
                RoundItem& it = items_[outputItems[o]];
                it.cached++;
                it.evaluated++;
                accept(it, next[o]);
            }
        }
    }

    Engine* engine_;
    std::vector<RoundItem> items_;
    std::vector<DecodeStat> decodes_;
    Napi::Promise::Deferred deferred_;
    Napi::ObjectReference engineRef_;
    Napi::ObjectReference cancelRef_;
    uint8_t* cancel_ = nullptr;
    size_t cancelLength_ = 0;
};

Napi::Value Engine::Round(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "engine not loaded");
    if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsTypedArray()) {
        throw Napi::TypeError::New(env, "round(items, cancelFlags: Uint8Array) expected");
    }
    Napi::Array arr = info[0].As<Napi::Array>();
    Napi::Uint8Array cancel = info[1].As<Napi::Uint8Array>();
    std::vector<RoundItem> items(arr.Length());
    std::vector<bool> slotUsed(state.streams, false);
    for (uint32_t i = 0; i < arr.Length(); ++i) {
        Napi::Object o = arr.Get(i).As<Napi::Object>();
        RoundItem& it = items[i];
        it.slot = getInt(o, "slot", -1);
        it.keep = getInt(o, "keep", 0);
        it.n = getInt(o, "n", 0);
        it.endId = getInt(o, "endId", -1);
        Napi::Value tv = o.Get("tokens");
        if (!tv.IsTypedArray() || tv.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
            throw Napi::TypeError::New(env, "round: item.tokens must be an Int32Array");
        }
        Napi::Int32Array t = tv.As<Napi::Int32Array>();
        it.tokens.assign(t.Data(), t.Data() + t.ElementLength());
        if (it.slot < 0 || it.slot >= state.streams || slotUsed[it.slot]) {
            throw Napi::RangeError::New(env, "round: slot out of range or used twice in one round");
        }
        slotUsed[it.slot] = true;
        if (it.keep < 0 || it.tokens.empty()) throw Napi::RangeError::New(env, "round: keep < 0 or no new tokens");
        for (llama_token tok : it.tokens) {
            if (tok < 0 || tok >= state.nVocab) throw Napi::RangeError::New(env, "round: token id out of range");
        }
        const int64_t needed = (int64_t)it.keep + (int64_t)it.tokens.size() + std::max(0, it.n - 1);
        if (needed > (int64_t)llama_n_ctx_seq(state.ctx)) throw Napi::RangeError::New(env, "round: context overflow");
    }
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true)) throw Napi::Error::New(env, "a round is already running");
    auto* worker = new RoundWorker(env, this, std::move(items), cancel);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Engine::Dispose(const Napi::CallbackInfo& info) {
    if (busy.load()) throw Napi::Error::New(info.Env(), "cannot dispose while a round is running");
    freeState();
    loaded = false;
    return info.Env().Undefined();
}

Napi::Object Engine::Init(Napi::Env env, Napi::Object exports) {
    Napi::Function cls = DefineClass(env, "Engine",
                                     {InstanceMethod("load", &Engine::Load), InstanceMethod("info", &Engine::Info),
                                      InstanceMethod("round", &Engine::Round), InstanceMethod("dispose", &Engine::Dispose)});
    exports.Set("Engine", cls);
    return exports;
}

}  // namespace

Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return Engine::Init(env, exports); }

NODE_API_MODULE(specdraft_engine, InitModule)
