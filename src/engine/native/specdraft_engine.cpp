// specdraft's native draft loop: one llama.cpp context holding many sequences, driven in decode STEPS. The same addon
// holds the Target (at the end of this file): one sequence of a target model that verifies a whole draft in one decode,
// its greedy tokens computed in llama.cpp's graph, for `specdraft generate`.
//
// Requests in flight live here (slot, new tokens, n, endId, draft so far). One native call (`run`) runs steps back to
// back off the JS thread until nothing is left in flight. While it runs, JS hands it new requests and cancels through
// `submit` (an inbox under a mutex, drained before every step), so requests join at step granularity and the steps
// never wait for the JS thread; drafts that finish reach JS at once through a progress callback. Each step: requests
// that just arrived get their slot's KV cache trimmed to the kept prefix; then ONE llama_decode evaluates the last
// draft token of every drafting request plus the new tokens of arriving ones (prefill, logits only on their last
// token). The next token of every sequence is the argmax of its logits, computed here, or with `backendSampling` by a
// greedy sampler inside llama.cpp's graph (on the GPU: no logits copied to the host). Requests join and leave at any
// step (continuous batching); finished drafts go back with the step's result.
//
// Correctness guard: llama.cpp reorders the logits buffer lazily, on the first logits access after a decode
// (llama_context::output_reorder). Touching the logits from several threads at once races on that reorder and gives
// wrong, run-to-run different drafts (node-llama-cpp's per-sequence sampling does exactly that). Here the row pointers
// of all outputs are fetched on one thread first (the first fetch reorders), and only then is argmax split over
// threads. `unguardedLogits` turns the guard off, only so a test can show that it is needed; `arrivalOrder` (also for
// tests) batches requests in arrival order, which makes llama.cpp reorder outputs and so exposes the race.
//
// JS interface (see src/engine/nativeAddon.ts for the typed view):
//   const engine = new Engine();
//   await engine.load({ binsDir, modelPath, streams, contextSize, batchSize, ubatchSize, gpuLayers, flashAttention,
//                       kvUnified, backendSampling, kvType, padBatch, threads, unguardedLogits, arrivalOrder, stepPrefill,
//                       verbose })
//       (every option is required, a missing or mistyped one is a TypeError: the defaults live in TypeScript)
//   engine.info()  -> { vocabSize, contextSizePerSequence, gpuDevice }
//   await engine.run(arrivals, cancelIds, maxSteps, onProgress)
//       -> { finished: [{ id, draft, cached, evaluated }], steps: Float64Array, active }
//       (maxSteps > 0 ends the run after that many steps even with requests in flight: the old loop, for comparison)
//       onProgress({ finished, steps }) is called mid-call when drafts finish; `steps` holds 8 numbers per decode
//       step: tokens, sequences, decode ms (llama_decode + llama_synchronize), sample ms (fetching the outputs +
//       argmax), host ms (time since the previous step ended: batch building, and for a call's first step the JS
//       round trip when requests were left in flight; idle time without requests is not counted), compute graphs
//       llama.cpp reused (not rebuilt; a CUDA graph can only be replayed for a reused graph), submit ms (the
//       llama_decode call alone: on a GPU the host's part — graph reuse or rebuild, inputs, kernel or CUDA-graph
//       launch — while the device may already run) and wait ms (llama_synchronize: the rest of the device's work)
//   engine.submit(arrivals, cancelIds) -> true when the run in flight took them (at its next step); false when no run is
//       live (none started, or it is ending): pass them to the next run() instead
//   engine.dispose()

#include <napi.h>

#include <algorithm>
#include <atomic>
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

// llama.cpp's logged errors, or a hint where it logged none.
std::string orUnknown(std::string s) { return s.empty() ? "unknown reason (run with verbose logs)" : s; }

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

using Clock = std::chrono::steady_clock;

double msBetween(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// ---- requests in flight ----

struct DraftItem {
    int32_t id = 0;  // the JS side's request id
    llama_seq_id slot = 0;
    int32_t keep = 0;                 // tokens of the slot's KV cache to keep (positions [0, keep))
    std::vector<llama_token> tokens;  // new tokens, evaluated at positions keep, keep+1, ...
    size_t offset = 0;                // new tokens already evaluated (a long prefill spans several steps)
    int32_t n = 0;                    // tokens to draft
    llama_token endId = -1;           // stop right after this token; -1: none
    std::vector<llama_token> draft;
    int32_t cached = 0;     // positions now valid in the slot's KV cache
    int32_t evaluated = 0;  // tokens this item put through llama_decode
    bool done = false;
    // this step's share of the batch
    int32_t take = 0;
    // a short prefill fed one token per step (see EngineState::stepPrefill); outputs before the last token are dropped
    bool stepwise = false;
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
    // Pad decode steps to every stream when at least this many streams draft (0: never). Idle streams then get a
    // throwaway token past their cached prefix (removed again before the next step), so the batch keeps the same
    // shape and sequence set from step to step: llama.cpp reuses its graph only for the same sequences (per-sequence
    // KV), and ggml-cuda captures a CUDA graph only after two calls of the same graph.
    int32_t padMinSequences = 0;
    // Arrivals with at most this many new tokens (and more than one) are fed one token per step, each with an output,
    // instead of all at once (0: never). Every step then has one token and one output per sequence, the shape of a
    // drafting step, so llama.cpp reuses its graph and ggml-cuda keeps replaying its CUDA graph: a multi-token step
    // makes llama.cpp rebuild the graph, and ggml-cuda (which keys its CUDA graphs by the graph's first node, the same
    // for both shapes) then runs two steps uncaptured and captures again on the third. Costs a decode per extra token.
    int32_t stepPrefill = 0;
    std::vector<int32_t> slotLength;  // positions [0, slotLength) of each slot's KV cache are valid
    std::string gpuDevice;  // empty: CPU only
    std::vector<DraftItem> active;  // requests in flight, in arrival order
    // end of the last native step, and whether it left requests in flight (then the time until the next step is host
    // overhead, not idleness)
    Clock::time_point lastStepEnd{};
    bool lastLeftActive = false;
};

// One decode step's counters, as sent to JS.
struct StepStat {
    int32_t tokens = 0;
    int32_t sequences = 0;
    double decodeMs = 0;
    double sampleMs = 0;
    double hostMs = 0;
    int32_t graphsReused = 0;  // compute graphs llama.cpp reused instead of rebuilding (one per ubatch)
    double submitMs = 0;       // the llama_decode call (part of decodeMs)
    double waitMs = 0;         // llama_synchronize after it (the rest of decodeMs)
};

// What a run sends to JS mid-call: drafts that finished, and the counters of the steps since the last message.
struct RunProgress {
    std::vector<DraftItem> finished;
    std::vector<StepStat> steps;
};

class Engine : public Napi::ObjectWrap<Engine> {
public:
    static Napi::Object Init(Napi::Env env, Napi::Object exports);
    explicit Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info) {}
    ~Engine() override { freeState(); }

    EngineState state;
    std::atomic<bool> busy{false};
    // the inbox of the run in flight: arrivals and cancels handed over by submit(), taken before each step
    std::mutex inboxMutex;
    std::vector<DraftItem> inboxArrivals;
    std::vector<int32_t> inboxCancels;
    bool live = false;              // a run takes from the inbox (set by run(), cleared by the run as it ends)
    std::vector<bool> slotBusy;     // slots of the requests accepted and not yet finished (guarded by inboxMutex)
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
    Napi::Value Run(const Napi::CallbackInfo& info);
    Napi::Value Submit(const Napi::CallbackInfo& info);
    std::vector<DraftItem> parseArrivals(Napi::Env env, const Napi::Value& value, const char* method);
    void markSlots(Napi::Env env, const std::vector<DraftItem>& items, const char* method);
    Napi::Value Dispose(const Napi::CallbackInfo& info);
};

// ---- load ----

// Every field comes from load()'s options object, which must name each one: the defaults live in TypeScript
// (src/engine/engineDefaults.ts, loadEngine.ts), never here.
struct LoadOptions {
    std::string binsDir;
    std::string modelPath;
    int32_t streams = 0;
    int32_t contextSize = 0;  // per sequence
    int32_t batchSize = 0;
    int32_t ubatchSize = 0;
    int32_t gpuLayers = 0;
    bool flashAttention = false;
    bool kvUnified = false;
    int32_t threads = 0;  // 0: llama.cpp's own thread count
    bool unguardedLogits = false;
    bool arrivalOrder = false;
    bool backendSampling = false;
    double padBatch = 0;  // fraction of the streams that must draft for a step to be padded to all; 0: off
    std::string kvType;  // KV cache element type: f16, q8_0, bf16, f32; empty: llama.cpp's (f16)
    int32_t stepPrefill;  // see EngineState::stepPrefill; 0: off
    bool verbose = false;
};

// The ggml type of a KV cache type name; throws on anything else.
ggml_type kvTypeOf(const std::string& name) {
    if (name == "f16") return GGML_TYPE_F16;
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    if (name == "f32") return GGML_TYPE_F32;
    if (name == "bf16") return GGML_TYPE_BF16;
    throw std::runtime_error("unknown KV cache type " + name + " (expected f16, q8_0, bf16 or f32)");
}

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
            if (!options_.kvType.empty()) {
                cp.type_k = kvTypeOf(options_.kvType);
                cp.type_v = cp.type_k;
            }
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
            engine_->slotBusy.assign(options_.streams, false);
            s.unguardedLogits = options_.unguardedLogits;
            s.arrivalOrder = options_.arrivalOrder;
            s.slotLength.assign(options_.streams, 0);
            s.stepPrefill = options_.stepPrefill;
            s.padMinSequences = options_.padBatch > 0
                ? std::max(1, (int32_t)std::ceil(options_.padBatch * options_.streams))
                : 0;
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
    Engine* engine_;
    LoadOptions options_;
    Napi::Promise::Deferred deferred_;
    Napi::ObjectReference engineRef_;
};

// Readers of one required field of an options object: a missing field or one of another type is a TypeError
// naming it, never a silent default.
Napi::Value getRequired(const Napi::Object& o, const char* key, bool ok(const Napi::Value&), const char* type) {
    Napi::Value v = o.Get(key);
    if (!ok(v)) throw Napi::TypeError::New(o.Env(), std::string("option ") + key + ": expected a " + type);
    return v;
}
int32_t getInt(const Napi::Object& o, const char* key) {
    auto isInt = [](const Napi::Value& v) {
        if (!v.IsNumber()) return false;
        const double d = v.As<Napi::Number>().DoubleValue();
        return std::floor(d) == d && d >= INT32_MIN && d <= INT32_MAX;
    };
    return getRequired(o, key, isInt, "32-bit integer").As<Napi::Number>().Int32Value();
}
double getNumber(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsNumber(); }, "number").As<Napi::Number>().DoubleValue();
}
bool getBool(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsBoolean(); }, "boolean").As<Napi::Boolean>().Value();
}
std::string getString(const Napi::Object& o, const char* key) {
    return getRequired(o, key, [](const Napi::Value& v) { return v.IsString(); }, "string").As<Napi::String>().Utf8Value();
}
// A required integer ≥ `min`: a RangeError naming the option otherwise.
int32_t getIntAtLeast(const Napi::Object& o, const char* key, int32_t min) {
    const int32_t value = getInt(o, key);
    if (value < min) {
        throw Napi::RangeError::New(o.Env(), std::string("option ") + key + ": expected ≥ " + std::to_string(min) + ", got " + std::to_string(value));
    }
    return value;
}

Napi::Value Engine::Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (loaded || busy.load()) throw Napi::Error::New(env, "engine already loaded");
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "load(options): options object expected");
    Napi::Object o = info[0].As<Napi::Object>();
    LoadOptions opt;
    opt.binsDir = getString(o, "binsDir");
    opt.modelPath = getString(o, "modelPath");
    opt.streams = getIntAtLeast(o, "streams", 1);
    opt.contextSize = getIntAtLeast(o, "contextSize", 1);
    opt.batchSize = getIntAtLeast(o, "batchSize", 1);
    opt.ubatchSize = getIntAtLeast(o, "ubatchSize", 1);
    opt.gpuLayers = getInt(o, "gpuLayers");
    opt.flashAttention = getBool(o, "flashAttention");
    opt.kvUnified = getBool(o, "kvUnified");
    opt.threads = getIntAtLeast(o, "threads", 0);
    opt.unguardedLogits = getBool(o, "unguardedLogits");
    opt.arrivalOrder = getBool(o, "arrivalOrder");
    opt.backendSampling = getBool(o, "backendSampling");
    opt.kvType = getString(o, "kvType");
    opt.stepPrefill = getIntAtLeast(o, "stepPrefill", 0);
    opt.padBatch = getNumber(o, "padBatch");
    if (!(opt.padBatch >= 0 && opt.padBatch <= 1)) {
        throw Napi::RangeError::New(env, "option padBatch: expected a fraction 0–1, got " + std::to_string(opt.padBatch));
    }
    opt.verbose = getBool(o, "verbose");
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_log_verbose = opt.verbose;
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

// ---- run: decode steps back to back ----
//
// One step = one llama_decode: every drafting request adds its last draft token, requests that just arrived add their
// new tokens (prefill; as many as the batch holds, the rest next step). A run repeats steps, taking what submit() put
// in its inbox before each, until nothing is in flight (or `maxSteps` steps ran).

Napi::Object finishedToJs(Napi::Env env, const std::vector<DraftItem>& finished, const std::vector<StepStat>& steps) {
    Napi::Object result = Napi::Object::New(env);
    Napi::Array list = Napi::Array::New(env, finished.size());
    for (size_t i = 0; i < finished.size(); ++i) {
        const DraftItem& it = finished[i];
        Napi::Object f = Napi::Object::New(env);
        Napi::Int32Array d = Napi::Int32Array::New(env, it.draft.size());
        std::copy(it.draft.begin(), it.draft.end(), d.Data());
        f.Set("id", it.id);
        f.Set("draft", d);
        f.Set("cached", it.cached);
        f.Set("evaluated", it.evaluated);
        list.Set((uint32_t)i, f);
    }
    Napi::Float64Array stats = Napi::Float64Array::New(env, steps.size() * 8);
    for (size_t i = 0; i < steps.size(); ++i) {
        double* row = stats.Data() + i * 8;
        row[0] = steps[i].tokens;
        row[1] = steps[i].sequences;
        row[2] = steps[i].decodeMs;
        row[3] = steps[i].sampleMs;
        row[4] = steps[i].hostMs;
        row[5] = steps[i].graphsReused;
        row[6] = steps[i].submitMs;
        row[7] = steps[i].waitMs;
    }
    result.Set("finished", list);
    result.Set("steps", stats);
    return result;
}

class RunWorker : public Napi::AsyncProgressQueueWorker<RunProgress> {
public:
    RunWorker(Napi::Env env, Engine* engine, std::vector<DraftItem> arrivals, std::vector<int32_t> cancels, int32_t maxSteps,
              Napi::Function onProgress)
        : Napi::AsyncProgressQueueWorker<RunProgress>(env),
          engine_(engine),
          arrivals_(std::move(arrivals)),
          cancels_(std::move(cancels)),
          maxSteps_(maxSteps),
          deferred_(Napi::Promise::Deferred::New(env)) {
        engineRef_ = Napi::Persistent(engine->Value());
        if (!onProgress.IsEmpty()) onProgress_ = Napi::Persistent(onProgress);
    }
    Napi::Promise Promise() { return deferred_.Promise(); }

    void Execute(const ExecutionProgress& progress) override {
        try {
            run(progress);
        } catch (const std::exception& e) {
            // the caches of the requests in flight are in an unknown state: drop them all (the JS side forgets them)
            {
                std::lock_guard<std::mutex> lock(engine_->inboxMutex);
                engine_->live = false;
                engine_->inboxArrivals.clear();
                engine_->inboxCancels.clear();
                std::fill(engine_->slotBusy.begin(), engine_->slotBusy.end(), false);
            }
            // the JS side forgets what these slots held; padding must not rely on it either
            std::fill(engine_->state.slotLength.begin(), engine_->state.slotLength.end(), 0);
            engine_->state.active.clear();
            engine_->state.lastLeftActive = false;
            SetError(e.what());
        }
    }

    void OnProgress(const RunProgress* data, size_t count) override {
        if (onProgress_.IsEmpty()) return;
        Napi::Env env = Env();
        Napi::HandleScope scope(env);
        for (size_t i = 0; i < count; ++i) onProgress_.Call({finishedToJs(env, data[i].finished, data[i].steps)});
    }

    void OnOK() override {
        engine_->busy.store(false);
        Napi::Env env = Env();
        Napi::Object result = finishedToJs(env, finished_, steps_);
        result.Set("active", (double)engine_->state.active.size());
        deferred_.Resolve(result);
    }
    void OnError(const Napi::Error& e) override {
        engine_->busy.store(false);
        deferred_.Reject(e.Value());
    }

private:
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

    // Decodes the batch and waits for it (timed as decode), then returns each output's next token (timed as sample;
    // outputs: batch indices with logits).
    void decode(const std::vector<int32_t>& outputIndices, std::vector<llama_token>& next, StepStat& stat) {
        EngineState& s = engine_->state;
        const int32_t reusedBefore = llama_perf_context(s.ctx).n_reused;
        const Clock::time_point start = Clock::now();
        const int32_t rc = llama_decode(s.ctx, s.batch);
        if (rc != 0) {
            throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + "): " + takeLoggedErrors());
        }
        const Clock::time_point submitted = Clock::now();
        // reading any output synchronizes anyway; doing it here puts the device's time under decode
        llama_synchronize(s.ctx);
        const Clock::time_point decoded = Clock::now();
        stat.decodeMs = msBetween(start, decoded);
        stat.submitMs = msBetween(start, submitted);
        stat.waitMs = msBetween(submitted, decoded);
        stat.graphsReused = llama_perf_context(s.ctx).n_reused - reusedBefore;
        next.assign(outputIndices.size(), -1);
        const int32_t count = (int32_t)outputIndices.size();
        // below ~1M logits one thread is faster than starting more
        const int32_t threads = (int64_t)count * s.nVocab >= (1 << 20) ? s.argmaxThreads : 1;
        if (s.backendSampling) {
            // each call applies any pending output reorder first, all on this thread
            for (int32_t k = 0; k < count; ++k) {
                next[k] = llama_get_sampled_token_ith(s.ctx, outputIndices[k]);
                if (next[k] == LLAMA_TOKEN_NULL) throw std::runtime_error("llama.cpp returned no sampled token: " + takeLoggedErrors());
            }
        } else if (s.unguardedLogits) {
            // UNSAFE (tests only): outputs fetched from several threads at once, as per-sequence samplers on a thread
            // pool do. The threads meet at a spinning barrier first, so their first fetches (each of which may run
            // llama.cpp's lazy output reorder) start together.
            const int32_t nThreads = std::max(2, std::min(4, (int32_t)std::thread::hardware_concurrency()));
            std::atomic<int32_t> ready{0};
            std::vector<std::thread> threadsVec;
            for (int32_t t = 0; t < nThreads; ++t) {
                threadsVec.emplace_back([&, t]() {
                    ready.fetch_add(1);
                    while (ready.load() < nThreads) {
                    }
                    for (int32_t k = t; k < count; k += nThreads) {
                        const float* row = llama_get_logits_ith(s.ctx, outputIndices[k]);
                        next[k] = row ? argmax(row, s.nVocab) : -1;
                    }
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
        stat.sampleMs = msBetween(decoded, Clock::now());
    }

    // One decode step for everything in flight; moves finished requests to `finished`.
    void step(Clock::time_point hostSince, std::vector<DraftItem>& finished, std::vector<StepStat>& steps) {
        EngineState& s = engine_->state;
        std::vector<DraftItem>& active = s.active;

        // batch in slot order: with per-sequence KV llama.cpp splits a batch into ubatches of consecutive sequence ids
        std::vector<DraftItem*> order;
        for (DraftItem& it : active) {
            if (!it.done) order.push_back(&it);
        }
        if (!s.arrivalOrder) {
            std::stable_sort(order.begin(), order.end(), [](const DraftItem* a, const DraftItem* b) { return a->slot < b->slot; });
        }
        // drafting requests get their one token first; prefills share what is left of the batch
        int32_t budget = s.batchCapacity;
        for (DraftItem* it : order) {
            if (it->offset == it->tokens.size() || it->stepwise) budget--;
        }
        for (DraftItem* it : order) {
            if (it->offset == it->tokens.size() || it->stepwise) {
                it->take = 1;
            } else {
                it->take = (int32_t)std::min<size_t>(it->tokens.size() - it->offset, (size_t)std::max(0, budget));
                budget -= it->take;
            }
        }

        s.batch.n_tokens = 0;
        outputIndices_.clear();
        outputItems_.clear();
        outputDrafts_.clear();
        int32_t sequences = 0;
        // padding: only steps of one token per drafting sequence (no prefill) with enough sequences drafting
        bool pad = s.padMinSequences > 0 && !s.arrivalOrder && (int32_t)order.size() >= s.padMinSequences &&
                   (int32_t)order.size() < s.streams;
        for (DraftItem* it : order) pad = pad && it->take == 1 && (it->tokens.size() - it->offset <= 1 || it->stepwise);
        size_t nextReal = 0;
        const int32_t nCtxSeq = (int32_t)llama_n_ctx_seq(s.ctx);
        llama_memory_t mem = llama_get_memory(s.ctx);
        for (int32_t slot = 0; pad && slot < s.streams; ++slot) {
            if (nextReal < order.size() && order[nextReal]->slot == slot) {
                ++nextReal;
                continue;
            }
            // an idle slot: a throwaway token right after its valid prefix (what a previous padding left is removed)
            const int32_t pos = s.slotLength[slot];
            if (pos >= nCtxSeq) continue;
            llama_memory_seq_rm(mem, slot, pos, -1);
            padSlots_.push_back(slot);
        }
        size_t nextPad = 0;
        for (DraftItem* it : order) {
            // throwaway tokens of idle slots below this item's slot come first (the batch stays in slot order)
            while (nextPad < padSlots_.size() && padSlots_[nextPad] < it->slot) {
                addToken(0, s.slotLength[padSlots_[nextPad]], padSlots_[nextPad], true);
                ++nextPad;
            }
            if (it->take == 0) continue;
            ++sequences;
            if (it->offset == it->tokens.size()) {
                outputIndices_.push_back(s.batch.n_tokens);
                outputItems_.push_back(it);
                outputDrafts_.push_back(true);
                addToken(it->draft.back(), it->cached, it->slot, true);
            } else {
                for (int32_t j = 0; j < it->take; ++j) {
                    const bool last = it->offset + j + 1 == it->tokens.size();
                    // a stepwise prefill asks for an output at every token, so the step has a drafting step's shape
                    if (last || it->stepwise) {
                        outputIndices_.push_back(s.batch.n_tokens);
                        outputItems_.push_back(it);
                        outputDrafts_.push_back(last);
                    }
                    addToken(it->tokens[it->offset + j], it->cached + j, it->slot, last || it->stepwise);
                }
                it->offset += it->take;
            }
            it->cached += it->take;
            it->evaluated += it->take;
            s.slotLength[it->slot] = it->cached;
        }
        for (; nextPad < padSlots_.size(); ++nextPad) addToken(0, s.slotLength[padSlots_[nextPad]], padSlots_[nextPad], true);
        padSlots_.clear();

        if (s.batch.n_tokens > 0) {
            StepStat stat;
            stat.hostMs = msBetween(hostSince, Clock::now());
            stat.tokens = s.batch.n_tokens;
            stat.sequences = sequences;
            decode(outputIndices_, next_, stat);
            steps.push_back(stat);
            for (size_t o = 0; o < outputItems_.size(); ++o) {
                if (!outputDrafts_[o]) continue;  // a stepwise prefill's token before its last: not a draft
                DraftItem* it = outputItems_[o];
                it->draft.push_back(next_[o]);
                if ((int32_t)it->draft.size() >= it->n || next_[o] == it->endId) it->done = true;
            }
        }

        collectFinished(finished);
        s.lastStepEnd = Clock::now();
        s.lastLeftActive = !active.empty();
    }

    // Moves finished requests out of the active list; their slots may be given to new requests from now on.
    void collectFinished(std::vector<DraftItem>& finished) {
        std::vector<DraftItem>& active = engine_->state.active;
        bool any = false;
        for (auto it = active.begin(); it != active.end();) {
            if (it->done) {
                finished.push_back(std::move(*it));
                it = active.erase(it);
                any = true;
            } else {
                ++it;
            }
        }
        if (!any) return;
        std::lock_guard<std::mutex> lock(engine_->inboxMutex);
        for (const DraftItem& it : finished) engine_->slotBusy[it.slot] = false;
    }

    // Adds arrivals (their slots' caches trimmed to the kept prefix) and then applies cancels (which may name them).
    void admit(std::vector<DraftItem>& arrivals, const std::vector<int32_t>& cancels) {
        EngineState& s = engine_->state;
        llama_memory_t mem = llama_get_memory(s.ctx);
        for (DraftItem& it : arrivals) {
            if (!llama_memory_seq_rm(mem, it.slot, it.keep, -1)) {
                throw std::runtime_error("could not trim the KV cache of sequence " + std::to_string(it.slot));
            }
            it.cached = it.keep;
            it.stepwise = s.stepPrefill > 0 && it.tokens.size() > 1 && (int32_t)it.tokens.size() <= s.stepPrefill;
            s.slotLength[it.slot] = it.keep;
            s.active.push_back(std::move(it));
        }
        arrivals.clear();
        for (int32_t id : cancels) {
            for (DraftItem& it : s.active) {
                if (it.id == id) it.done = true;
            }
        }
    }

    // Takes the inbox; when nothing is in flight and the inbox is empty (or `ending`), the run stops being live, so
    // later submits go to the next run. Returns whether the run goes on.
    bool takeInbox(bool ending) {
        std::vector<DraftItem> arrivals;
        std::vector<int32_t> cancels;
        bool goOn;
        {
            std::lock_guard<std::mutex> lock(engine_->inboxMutex);
            arrivals.swap(engine_->inboxArrivals);
            cancels.swap(engine_->inboxCancels);
            goOn = !ending && !(engine_->state.active.empty() && arrivals.empty());
            if (!goOn) engine_->live = false;
        }
        admit(arrivals, cancels);
        return goOn;
    }

    void run(const ExecutionProgress& progress) {
        EngineState& s = engine_->state;
        // the JS round trip counts as host time only when the last step left requests in flight (else: idle)
        const Clock::time_point callStart = Clock::now();
        Clock::time_point hostSince = s.lastLeftActive ? s.lastStepEnd : callStart;
        admit(arrivals_, cancels_);

        RunProgress pending;
        for (int32_t n = 0; takeInbox(maxSteps_ > 0 && n >= maxSteps_); ++n) {
            step(hostSince, pending.finished, pending.steps);
            hostSince = s.lastStepEnd;
            if (!pending.finished.empty()) {
                // finished drafts go to JS now; the next step does not wait for JS
                progress.Send(&pending, 1);
                pending.finished.clear();
                pending.steps.clear();
            }
        }
        // requests cancelled in the last inbox and never stepped
        collectFinished(pending.finished);
        finished_ = std::move(pending.finished);
        steps_ = std::move(pending.steps);
    }

    Engine* engine_;
    std::vector<DraftItem> arrivals_;
    std::vector<int32_t> cancels_;
    int32_t maxSteps_;
    std::vector<DraftItem> finished_;
    std::vector<StepStat> steps_;
    std::vector<int32_t> outputIndices_;
    std::vector<DraftItem*> outputItems_;
    std::vector<bool> outputDrafts_;  // per output: its token is the item's next draft token
    std::vector<int32_t> padSlots_;
    std::vector<llama_token> next_;
    Napi::Promise::Deferred deferred_;
    Napi::ObjectReference engineRef_;
    Napi::FunctionReference onProgress_;
};

std::vector<DraftItem> Engine::parseArrivals(Napi::Env env, const Napi::Value& value, const char* method) {
    const std::string m(method);
    Napi::Array arr = value.As<Napi::Array>();
    std::vector<DraftItem> items(arr.Length());
    const int64_t nCtxSeq = (int64_t)llama_n_ctx_seq(state.ctx);
    for (uint32_t i = 0; i < arr.Length(); ++i) {
        Napi::Object o = arr.Get(i).As<Napi::Object>();
        DraftItem& it = items[i];
        it.id = getInt(o, "id");
        it.slot = getInt(o, "slot");
        it.keep = getInt(o, "keep");
        it.n = getInt(o, "n");
        it.endId = getInt(o, "endId");
        Napi::Value tv = o.Get("tokens");
        if (!tv.IsTypedArray() || tv.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
            throw Napi::TypeError::New(env, m + ": item.tokens must be an Int32Array");
        }
        Napi::Int32Array t = tv.As<Napi::Int32Array>();
        it.tokens.assign(t.Data(), t.Data() + t.ElementLength());
        if (it.slot < 0 || it.slot >= state.streams) throw Napi::RangeError::New(env, m + ": slot out of range");
        if (it.keep < 0 || it.tokens.empty() || it.n < 1) throw Napi::RangeError::New(env, m + ": keep < 0, no new tokens or n < 1");
        for (llama_token tok : it.tokens) {
            if (tok < 0 || tok >= state.nVocab) throw Napi::RangeError::New(env, m + ": token id out of range");
        }
        if ((int64_t)it.keep + (int64_t)it.tokens.size() + it.n - 1 > nCtxSeq) throw Napi::RangeError::New(env, m + ": context overflow");
    }
    return items;
}

// Marks the items' slots busy; throws when one is taken by a request in flight. Call with inboxMutex held.
void Engine::markSlots(Napi::Env env, const std::vector<DraftItem>& items, const char* method) {
    for (size_t i = 0; i < items.size(); ++i) {
        bool clash = slotBusy[items[i].slot];
        for (size_t j = 0; j < i; ++j) clash = clash || items[j].slot == items[i].slot;
        if (clash) throw Napi::RangeError::New(env, std::string(method) + ": slot already in use");
    }
    for (const DraftItem& it : items) slotBusy[it.slot] = true;
}

Napi::Value Engine::Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "engine not loaded");
    if (info.Length() < 4 || !info[0].IsArray() || !info[1].IsTypedArray() || !info[2].IsNumber() || !info[3].IsFunction()) {
        throw Napi::TypeError::New(env, "run(arrivals, cancelIds: Int32Array, maxSteps: number, onProgress: function) expected");
    }
    Napi::Int32Array cancelArray = info[1].As<Napi::Int32Array>();
    const int32_t maxSteps = info[2].As<Napi::Number>().Int32Value();
    std::vector<int32_t> cancels(cancelArray.Data(), cancelArray.Data() + cancelArray.ElementLength());
    std::vector<DraftItem> items = parseArrivals(env, info[0], "run");
    if (busy.load()) throw Napi::Error::New(env, "a run is already in flight");
    {
        std::lock_guard<std::mutex> lock(inboxMutex);
        markSlots(env, items, "run");
        live = true;
    }
    busy.store(true);
    auto* worker = new RunWorker(env, this, std::move(items), std::move(cancels), maxSteps, info[3].As<Napi::Function>());
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Engine::Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "engine not loaded");
    if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsTypedArray()) {
        throw Napi::TypeError::New(env, "submit(arrivals, cancelIds: Int32Array) expected");
    }
    std::vector<DraftItem> items = parseArrivals(env, info[0], "submit");
    Napi::Int32Array cancelArray = info[1].As<Napi::Int32Array>();
    std::lock_guard<std::mutex> lock(inboxMutex);
    if (!live) return Napi::Boolean::New(env, false);
    markSlots(env, items, "submit");
    for (DraftItem& it : items) inboxArrivals.push_back(std::move(it));
    inboxCancels.insert(inboxCancels.end(), cancelArray.Data(), cancelArray.Data() + cancelArray.ElementLength());
    return Napi::Boolean::New(env, true);
}

Napi::Value Engine::Dispose(const Napi::CallbackInfo& info) {
    if (busy.load()) throw Napi::Error::New(info.Env(), "cannot dispose while a run is in flight");
    state.active.clear();
    slotBusy.assign(slotBusy.size(), false);
    freeState();
    loaded = false;
    return info.Env().Undefined();
}

Napi::Object Engine::Init(Napi::Env env, Napi::Object exports) {
    Napi::Function cls = DefineClass(env, "Engine",
                                     {InstanceMethod("load", &Engine::Load), InstanceMethod("info", &Engine::Info),
                                      InstanceMethod("run", &Engine::Run), InstanceMethod("submit", &Engine::Submit),
                                      InstanceMethod("dispose", &Engine::Dispose)});
    exports.Set("Engine", cls);
    return exports;
}


// ==== the target: one sequence of a target model, for speculative generation (src/generate/NativeTarget.ts) ====
//
// Verification in one call: `evaluate(tokens, keep, outputFrom)` trims the KV cache to its first `keep` cells (what a
// rejected draft left behind goes), decodes `tokens` at positions keep, keep+1, ... (one llama_decode when they fit the
// batch) and returns the greedy next token after each of tokens[outputFrom..]. With `backendSampling` the argmax of
// every output row is computed inside llama.cpp's graph (on the GPU when offloaded; llama.cpp's greedy backend sampler
// with up to `maxOutputs` outputs per sequence), so k + 1 token ids cross to the host instead of (k + 1) × n_vocab
// logits and no host code touches the logits; without it, the host takes the argmax of each row. `generate(tokens,
// keep, maxTokens)` is the target alone: the prompt, then one token per decode until an end-of-generation token or
// maxTokens, the loop native (no JS between tokens).
//
//   const target = new Target();
//   await target.load({ binsDir, modelPath, contextSize, batchSize, ubatchSize, gpuLayers, flashAttention,
//                       backendSampling, maxOutputs, threads, verbose });   // every option required
//   target.info()  -> { vocabSize, contextSize, gpuDevice, maxOutputs, eogIds: Int32Array }
//   await target.evaluate(tokens: Int32Array, keep, outputFrom) -> { next: Int32Array, cached, stats: Float64Array }
//   await target.generate(tokens: Int32Array, keep, maxTokens)  -> { tokens: Int32Array, cached, stats: Float64Array }
// (`cached`: tokens now in the KV cache)
//   await target.logitGap(tokens: Int32Array, promptLength, a, b) -> { gap: logit[a] − logit[b] after tokens on the
//         target alone's path, disagreement: the largest logit difference of that path and a verification's there }
//   target.dispose()
// `stats` (targetStatFields numbers): llama_decode calls, tokens decoded, submit ms (the llama_decode calls), wait ms
// (llama_synchronize after each), read ms (fetching the sampled ids or the argmax over logits), graphs llama.cpp reused.

constexpr int32_t targetStatFields = 6;

struct TargetStats {
    int32_t decodes = 0;
    int32_t tokens = 0;
    double submitMs = 0;
    double waitMs = 0;
    double readMs = 0;
    int32_t graphsReused = 0;
};

struct TargetOptions {
    std::string binsDir;
    std::string modelPath;
    int32_t contextSize = 0;
    int32_t batchSize = 0;
    int32_t ubatchSize = 0;
    int32_t gpuLayers = 0;
    llama_flash_attn_type flashAttention = LLAMA_FLASH_ATTN_TYPE_AUTO;
    bool backendSampling = false;
    int32_t maxOutputs = 0;  // greedy outputs one evaluate() may ask for (k + 1 for drafts of k)
    int32_t threads = 0;
};

class Target : public Napi::ObjectWrap<Target> {
public:
    static void Init(Napi::Env env, Napi::Object exports);
    explicit Target(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Target>(info) {}
    ~Target() override { freeModel(); }

    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    llama_batch batch{};
    int32_t batchCapacity = 0;
    int32_t nVocab = 0;
    int32_t maxOutputs = 0;
    int32_t argmaxThreads = 1;  // host argmax (without backendSampling): rows split over up to 8 threads
    int32_t length = 0;  // cells [0, length) of the KV cache hold evaluated tokens
    bool backendSampling = false;
    llama_sampler* sampler = nullptr;
    llama_sampler_seq_config samplerConfig{};
    llama_context_params baseParams{};  // the context's parameters but its samplers
    std::vector<llama_token> eogIds;
    std::vector<bool> isEog;
    std::string gpuDevice;
    std::atomic<bool> busy{false};
    bool loaded = false;

    void freeModel() {
        if (ctx) llama_free(ctx);
        if (batchCapacity > 0) llama_batch_free(batch);
        if (model) llama_model_free(model);
        if (sampler) llama_sampler_free(sampler);
        ctx = nullptr;
        model = nullptr;
        sampler = nullptr;
        batchCapacity = 0;
        loaded = false;
    }

    // Decodes tokens[0..count) at positions pos, pos+1, ... with outputs from index firstOutput on (count: none);
    // appends their greedy next tokens to `next`.
    void decode(const llama_token* tokens, int32_t count, int32_t pos, int32_t firstOutput, std::vector<llama_token>& next,
                TargetStats& stats) {
        batch.n_tokens = 0;
        for (int32_t j = 0; j < count; ++j) {
            batch.token[j] = tokens[j];
            batch.pos[j] = pos + j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = j >= firstOutput ? 1 : 0;
        }
        batch.n_tokens = count;
        const int32_t reusedBefore = llama_perf_context(ctx).n_reused;
        const Clock::time_point start = Clock::now();
        const int32_t rc = llama_decode(ctx, batch);
        if (rc != 0) throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + "): " + takeLoggedErrors());
        const Clock::time_point submitted = Clock::now();
        llama_synchronize(ctx);
        const Clock::time_point decoded = Clock::now();
        if (backendSampling) {
            for (int32_t j = firstOutput; j < count; ++j) {
                const llama_token token = llama_get_sampled_token_ith(ctx, j);
                if (token == LLAMA_TOKEN_NULL) throw std::runtime_error("llama.cpp returned no sampled token: " + takeLoggedErrors());
                next.push_back(token);
            }
        } else if (count > firstOutput) {
            // every row fetched on this thread first (the first fetch applies llama.cpp's pending output reorder: the
            // guard the draft engine explains at the top), then the argmax of the rows split over threads
            const int32_t outputs = count - firstOutput;
            std::vector<const float*> rows(outputs);
            for (int32_t k = 0; k < outputs; ++k) {
                rows[k] = llama_get_logits_ith(ctx, firstOutput + k);
                if (!rows[k]) throw std::runtime_error("llama.cpp returned no logits for an output");
            }
            const size_t first = next.size();
            next.resize(first + outputs);
            const int32_t threads = (int64_t)outputs * nVocab >= (1 << 20) ? argmaxThreads : 1;
            parallelFor(outputs, threads, [&](int32_t k) { next[first + k] = argmax(rows[k], nVocab); });
        }
        stats.decodes++;
        stats.tokens += count;
        stats.submitMs += msBetween(start, submitted);
        stats.waitMs += msBetween(submitted, decoded);
        stats.readMs += msBetween(decoded, Clock::now());
        stats.graphsReused += llama_perf_context(ctx).n_reused - reusedBefore;
    }

    // Trims the cache to `keep` cells, then decodes `tokens` in batch-sized chunks, asking outputs from index
    // outputFrom on (tokens.size(): none); returns the greedy next tokens of those outputs.
    std::vector<llama_token> evaluate(const std::vector<llama_token>& tokens, int32_t keep, int32_t outputFrom, TargetStats& stats) {
        if (!llama_memory_seq_rm(llama_get_memory(ctx), 0, keep, -1)) throw std::runtime_error("could not trim the KV cache");
        length = keep;
        std::vector<llama_token> next;
        const int32_t count = (int32_t)tokens.size();
        for (int32_t offset = 0; offset < count; offset += batchCapacity) {
            const int32_t chunk = std::min(batchCapacity, count - offset);
            const int32_t firstOutput = std::min(chunk, std::max(0, outputFrom - offset));
            decode(tokens.data() + offset, chunk, length, firstOutput, next, stats);
            length += chunk;
        }
        return next;
    }

    // How near a tie the target alone's choice between tokens a and b after `tokens` was, and how much two kernel paths
    // disagree there. In a context of its own without samplers (so its logits reach the host): the target alone's path
    // (the first promptLength decoded as generate() decodes a prompt, in batch-sized chunks, then one token a decode)
    // gives logit[a] − logit[b]; then `tokens` + [b] as verification decodes them (in one decode where they fit, the
    // output at the last of `tokens`) gives the same position's logits by the other kernels, and the largest
    // difference of the two over the vocabulary is their disagreement. A GPU's multi-token and one-token kernels round
    // differently; the outputs of the target alone and of speculation can part only where the gap is within twice it.
    std::pair<double, double> logitGap(const std::vector<llama_token>& tokens, int32_t promptLength, llama_token a, llama_token b) {
        llama_context* c = llama_init_from_model(model, baseParams);
        if (!c) throw std::runtime_error("llama.cpp could not create a context: " + orUnknown(takeLoggedErrors()));
        llama_batch one = llama_batch_init(batchCapacity, 0, 1);
        struct Release {
            llama_context* c;
            llama_batch* b;
            ~Release() {
                llama_batch_free(*b);
                llama_free(c);
            }
        } release{c, &one};
        // decodes seq[from, from + n) at their positions, the logits of index `output` (-1: none) asked
        auto run = [&](const std::vector<llama_token>& seq, int32_t from, int32_t n, int32_t output) {
            one.n_tokens = n;
            for (int32_t j = 0; j < n; ++j) {
                one.token[j] = seq[from + j];
                one.pos[j] = from + j;
                one.n_seq_id[j] = 1;
                one.seq_id[j][0] = 0;
                one.logits[j] = from + j == output ? 1 : 0;
            }
            const int32_t rc = llama_decode(c, one);
            if (rc != 0) throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + "): " + takeLoggedErrors());
        };
        const int32_t count = (int32_t)tokens.size();
        for (int32_t offset = 0; offset < promptLength; offset += batchCapacity) {
            run(tokens, offset, std::min(batchCapacity, promptLength - offset), promptLength - 1);
        }
        for (int32_t i = promptLength; i < count; ++i) run(tokens, i, 1, i);
        const float* row = llama_get_logits_ith(c, -1);
        if (!row) throw std::runtime_error("llama.cpp returned no logits");
        const std::vector<float> alone(row, row + nVocab);

        llama_memory_clear(llama_get_memory(c), true);
        std::vector<llama_token> verified(tokens);
        verified.push_back(b);
        const int32_t total = (int32_t)verified.size();
        double disagreement = 0;
        for (int32_t offset = 0; offset < total; offset += batchCapacity) {
            const int32_t chunk = std::min(batchCapacity, total - offset);
            run(verified, offset, chunk, count - 1);
            if (count - 1 < offset || count - 1 >= offset + chunk) continue;
            const float* other = llama_get_logits_ith(c, count - 1 - offset);
            if (!other) throw std::runtime_error("llama.cpp returned no logits");
            for (int32_t v = 0; v < nVocab; ++v) {
                disagreement = std::max(disagreement, std::fabs((double)alone[v] - (double)other[v]));
            }
        }
        return {(double)alone[a] - (double)alone[b], disagreement};
    }

    // The target alone: evaluates `tokens` after `keep` cached ones, then greedy tokens one decode each until an
    // end-of-generation token (not included) or maxTokens of them.
    std::vector<llama_token> generate(const std::vector<llama_token>& tokens, int32_t keep, int32_t maxTokens, TargetStats& stats) {
        std::vector<llama_token> out;
        std::vector<llama_token> next = evaluate(tokens, keep, (int32_t)tokens.size() - 1, stats);
        const int32_t nCtx = (int32_t)llama_n_ctx_seq(ctx);
        while (true) {
            const llama_token token = next.back();
            if (isEog[token]) break;
            out.push_back(token);
            if ((int32_t)out.size() >= maxTokens || length >= nCtx) break;
            next.clear();
            decode(&token, 1, length, 0, next, stats);
            length += 1;
        }
        return out;
    }

private:
    Napi::Value Load(const Napi::CallbackInfo& info);
    Napi::Value Info(const Napi::CallbackInfo& info);
    Napi::Value Evaluate(const Napi::CallbackInfo& info);
    Napi::Value Generate(const Napi::CallbackInfo& info);
    Napi::Value LogitGap(const Napi::CallbackInfo& info);
    Napi::Value Dispose(const Napi::CallbackInfo& info);
    std::vector<llama_token> readTokens(Napi::Env env, const Napi::Value& value, const char* method);
};


Napi::Float64Array targetStatsToJs(Napi::Env env, const TargetStats& stats) {
    Napi::Float64Array a = Napi::Float64Array::New(env, targetStatFields);
    a[0] = stats.decodes;
    a[1] = stats.tokens;
    a[2] = stats.submitMs;
    a[3] = stats.waitMs;
    a[4] = stats.readMs;
    a[5] = stats.graphsReused;
    return a;
}

Napi::Int32Array tokensToJs(Napi::Env env, const std::vector<llama_token>& tokens) {
    Napi::Int32Array a = Napi::Int32Array::New(env, tokens.size());
    std::copy(tokens.begin(), tokens.end(), a.Data());
    return a;
}

// One call of the target off the JS thread; `busy` guards against a second one meanwhile.
class TargetWorker : public Napi::AsyncWorker {
public:
    TargetWorker(Napi::Env env, Target* target)
        : Napi::AsyncWorker(env), target_(target), deferred_(Napi::Promise::Deferred::New(env)) {
        targetRef_ = Napi::Persistent(target->Value());
        target_->busy.store(true);
    }
    Napi::Promise Promise() { return deferred_.Promise(); }
    void Execute() override {
        try {
            work();
        } catch (const std::exception& e) {
            SetError(e.what());
        }
    }
    void OnOK() override {
        target_->busy.store(false);
        deferred_.Resolve(result(Env()));
    }
    void OnError(const Napi::Error& e) override {
        target_->busy.store(false);
        deferred_.Reject(e.Value());
    }

protected:
    virtual void work() = 0;
    virtual Napi::Value result(Napi::Env env) = 0;
    Target* target_;

private:
    Napi::Promise::Deferred deferred_;
    Napi::ObjectReference targetRef_;
};

class TargetLoadWorker : public TargetWorker {
public:
    TargetLoadWorker(Napi::Env env, Target* target, TargetOptions options) : TargetWorker(env, target), options_(std::move(options)) {}

protected:
    void work() override {
        Target& t = *target_;
        try {
            initBackends(options_.binsDir);
            takeLoggedErrors();
            llama_model_params mp = llama_model_default_params();
            mp.n_gpu_layers = options_.gpuLayers;
            t.model = llama_model_load_from_file(options_.modelPath.c_str(), mp);
            if (!t.model) throw std::runtime_error("llama.cpp could not load the model: " + orUnknown(takeLoggedErrors()));

            llama_context_params cp = llama_context_default_params();
            cp.n_seq_max = 1;
            cp.n_ctx = (uint32_t)options_.contextSize;
            cp.n_batch = (uint32_t)options_.batchSize;
            cp.n_ubatch = (uint32_t)std::min(options_.ubatchSize, options_.batchSize);
            cp.n_outputs_max = (uint32_t)options_.maxOutputs;
            cp.flash_attn_type = options_.flashAttention;
            cp.no_perf = true;
            if (options_.threads > 0) {
                cp.n_threads = options_.threads;
                cp.n_threads_batch = options_.threads;
            }
            t.baseParams = cp;  // without samplers: logitGap() makes contexts of its own from it
            if (options_.backendSampling) {
                // greedy in the graph for every output of the one sequence (llama.cpp builds one argmax per output row)
                t.sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
                llama_sampler_chain_add(t.sampler, llama_sampler_init_greedy());
                t.samplerConfig = {0, t.sampler};
                cp.samplers = &t.samplerConfig;
                cp.n_samplers = 1;
                cp.n_outputs_max_per_seq = (uint32_t)options_.maxOutputs;
                t.backendSampling = true;
            }
            t.ctx = llama_init_from_model(t.model, cp);
            if (!t.ctx) throw std::runtime_error("llama.cpp could not create a context: " + orUnknown(takeLoggedErrors()));
            t.batchCapacity = (int32_t)llama_n_batch(t.ctx);  // llama.cpp caps n_batch at n_ctx
            t.batch = llama_batch_init(t.batchCapacity, 0, 1);
            const llama_vocab* vocab = llama_model_get_vocab(t.model);
            t.nVocab = llama_vocab_n_tokens(vocab);
            t.maxOutputs = options_.maxOutputs;
            t.argmaxThreads = (int32_t)std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
            t.length = 0;
            t.isEog.assign(t.nVocab, false);
            t.eogIds.clear();
            for (llama_token id = 0; id < t.nVocab; ++id) {
                if (llama_vocab_is_eog(vocab, id)) {
                    t.isEog[id] = true;
                    t.eogIds.push_back(id);
                }
            }
            t.gpuDevice.clear();
            if (options_.gpuLayers != 0) {
                for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
                    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
                    const auto type = ggml_backend_dev_type(dev);
                    if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                        t.gpuDevice = std::string(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev))) + ":" +
                                      ggml_backend_dev_description(dev);
                        break;
                    }
                }
            }
        } catch (...) {
            t.freeModel();
            throw;
        }
    }
    Napi::Value result(Napi::Env env) override {
        target_->loaded = true;
        return env.Undefined();
    }

private:
    TargetOptions options_;
};

class TargetEvaluateWorker : public TargetWorker {
public:
    TargetEvaluateWorker(Napi::Env env, Target* target, std::vector<llama_token> tokens, int32_t keep, int32_t outputFrom,
                         int32_t maxTokens)
        : TargetWorker(env, target), tokens_(std::move(tokens)), keep_(keep), outputFrom_(outputFrom), maxTokens_(maxTokens) {}

protected:
    void work() override {
        out_ = maxTokens_ > 0 ? target_->generate(tokens_, keep_, maxTokens_, stats_)
                              : target_->evaluate(tokens_, keep_, outputFrom_, stats_);
    }
    Napi::Value result(Napi::Env env) override {
        Napi::Object o = Napi::Object::New(env);
        o.Set(maxTokens_ > 0 ? "tokens" : "next", tokensToJs(env, out_));
        o.Set("stats", targetStatsToJs(env, stats_));
        o.Set("cached", target_->length);
        return o;
    }

private:
    std::vector<llama_token> tokens_;
    int32_t keep_;
    int32_t outputFrom_;
    int32_t maxTokens_;  // > 0: generate() instead of evaluate()
    std::vector<llama_token> out_;
    TargetStats stats_;
};

class TargetLogitGapWorker : public TargetWorker {
public:
    TargetLogitGapWorker(Napi::Env env, Target* target, std::vector<llama_token> tokens, int32_t promptLength, llama_token a,
                         llama_token b)
        : TargetWorker(env, target), tokens_(std::move(tokens)), promptLength_(promptLength), a_(a), b_(b) {}

protected:
    void work() override { gap_ = target_->logitGap(tokens_, promptLength_, a_, b_); }
    Napi::Value result(Napi::Env env) override {
        Napi::Object o = Napi::Object::New(env);
        o.Set("gap", gap_.first);
        o.Set("disagreement", gap_.second);
        return o;
    }

private:
    std::vector<llama_token> tokens_;
    int32_t promptLength_;
    llama_token a_;
    llama_token b_;
    std::pair<double, double> gap_{0, 0};
};

Napi::Value Target::Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (loaded || busy.load()) throw Napi::Error::New(env, "Target.load: already loaded");
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "Target.load(options): options object expected");
    Napi::Object o = info[0].As<Napi::Object>();
    TargetOptions opt;
    opt.binsDir = getString(o, "binsDir");
    opt.modelPath = getString(o, "modelPath");
    opt.contextSize = getIntAtLeast(o, "contextSize", 1);
    opt.batchSize = getIntAtLeast(o, "batchSize", 1);
    opt.ubatchSize = getIntAtLeast(o, "ubatchSize", 1);
    opt.gpuLayers = getInt(o, "gpuLayers");
    const std::string flash = getString(o, "flashAttention");
    if (flash != "auto" && flash != "on" && flash != "off") {
        throw Napi::RangeError::New(env, "Target.load: flashAttention must be \"auto\", \"on\" or \"off\", got \"" + flash + "\"");
    }
    opt.flashAttention = flash == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : flash == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                          : LLAMA_FLASH_ATTN_TYPE_AUTO;
    opt.backendSampling = getBool(o, "backendSampling");
    opt.maxOutputs = getIntAtLeast(o, "maxOutputs", 1);
    opt.threads = getIntAtLeast(o, "threads", 0);
    const bool verbose = getBool(o, "verbose");
    if (opt.contextSize < 2 || opt.batchSize < 1 || opt.ubatchSize < 1 || opt.maxOutputs < 1 || opt.threads < 0) {
        throw Napi::RangeError::New(env,
                                    "Target.load: expected contextSize ≥ 2, batchSize, ubatchSize, maxOutputs ≥ 1, threads ≥ 0");
    }
    if (opt.maxOutputs > opt.batchSize) throw Napi::RangeError::New(env, "Target.load: maxOutputs must not exceed batchSize");
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_log_verbose = verbose;
    }
    auto* worker = new TargetLoadWorker(env, this, std::move(opt));
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Target::Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "Target.info: not loaded");
    Napi::Object o = Napi::Object::New(env);
    o.Set("vocabSize", nVocab);
    o.Set("contextSize", (double)llama_n_ctx_seq(ctx));
    o.Set("gpuDevice", gpuDevice);
    o.Set("maxOutputs", maxOutputs);
    o.Set("eogIds", tokensToJs(env, eogIds));
    return o;
}

std::vector<llama_token> Target::readTokens(Napi::Env env, const Napi::Value& value, const char* method) {
    if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
        throw Napi::TypeError::New(env, std::string(method) + ": tokens must be an Int32Array");
    }
    Napi::Int32Array t = value.As<Napi::Int32Array>();
    std::vector<llama_token> tokens(t.Data(), t.Data() + t.ElementLength());
    if (tokens.empty()) throw Napi::RangeError::New(env, std::string(method) + ": expected at least one token, got none");
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= nVocab) {
            throw Napi::RangeError::New(env, std::string(method) + ": token id " + std::to_string(tokens[i]) + " at index " +
                                                 std::to_string(i) + ": expected 0 ≤ id < " + std::to_string(nVocab));
        }
    }
    return tokens;
}

// evaluate(tokens, keep, outputFrom) and generate(tokens, keep, maxTokens) share their checks.
Napi::Value Target::Evaluate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "Target.evaluate: not loaded");
    if (info.Length() < 3 || !info[1].IsNumber() || !info[2].IsNumber()) {
        throw Napi::TypeError::New(env, "Target.evaluate(tokens: Int32Array, keep: number, outputFrom: number) expected");
    }
    std::vector<llama_token> tokens = readTokens(env, info[0], "Target.evaluate");
    const int32_t keep = info[1].As<Napi::Number>().Int32Value();
    const int32_t outputFrom = info[2].As<Napi::Number>().Int32Value();
    const int32_t count = (int32_t)tokens.size();
    if (keep < 0 || keep > length) {
        throw Napi::RangeError::New(env, "Target.evaluate: keep " + std::to_string(keep) + ": expected 0 ≤ keep ≤ " +
                                             std::to_string(length) + " (the tokens in the KV cache)");
    }
    if (outputFrom < 0 || outputFrom >= count || count - outputFrom > maxOutputs) {
        throw Napi::RangeError::New(env, "Target.evaluate: outputFrom " + std::to_string(outputFrom) + " of " + std::to_string(count) +
                                             " tokens: expected at least 1 and at most " + std::to_string(maxOutputs) + " outputs");
    }
    if ((int64_t)keep + count > (int64_t)llama_n_ctx_seq(ctx)) throw Napi::RangeError::New(env, "Target.evaluate: context overflow");
    if (busy.load()) throw Napi::Error::New(env, "Target.evaluate: a call is already in flight");
    auto* worker = new TargetEvaluateWorker(env, this, std::move(tokens), keep, outputFrom, 0);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Target::Generate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "Target.generate: not loaded");
    if (info.Length() < 3 || !info[1].IsNumber() || !info[2].IsNumber()) {
        throw Napi::TypeError::New(env, "Target.generate(tokens: Int32Array, keep: number, maxTokens: number) expected");
    }
    std::vector<llama_token> tokens = readTokens(env, info[0], "Target.generate");
    const int32_t keep = info[1].As<Napi::Number>().Int32Value();
    const int32_t maxTokens = info[2].As<Napi::Number>().Int32Value();
    if (keep < 0 || keep > length) throw Napi::RangeError::New(env, "Target.generate: keep beyond the tokens in the KV cache");
    if (maxTokens < 1) throw Napi::RangeError::New(env, "Target.generate: maxTokens must be ≥ 1");
    if ((int64_t)keep + (int64_t)tokens.size() > (int64_t)llama_n_ctx_seq(ctx)) {
        throw Napi::RangeError::New(env, "Target.generate: context overflow");
    }
    if (busy.load()) throw Napi::Error::New(env, "Target.generate: a call is already in flight");
    auto* worker = new TargetEvaluateWorker(env, this, std::move(tokens), keep, 0, maxTokens);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Target::LogitGap(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "Target.logitGap: not loaded");
    if (info.Length() < 4 || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber()) {
        throw Napi::TypeError::New(env, "Target.logitGap(tokens: Int32Array, promptLength: number, a: number, b: number) expected");
    }
    std::vector<llama_token> tokens = readTokens(env, info[0], "Target.logitGap");
    const int32_t promptLength = info[1].As<Napi::Number>().Int32Value();
    const int32_t a = info[2].As<Napi::Number>().Int32Value();
    const int32_t b = info[3].As<Napi::Number>().Int32Value();
    if (promptLength < 1 || promptLength > (int32_t)tokens.size()) {
        throw Napi::RangeError::New(env, "Target.logitGap: promptLength must be 1 … the number of tokens");
    }
    if (a < 0 || a >= nVocab || b < 0 || b >= nVocab) throw Napi::RangeError::New(env, "Target.logitGap: token ids out of the vocabulary");
    if ((int64_t)tokens.size() + 1 > (int64_t)llama_n_ctx_seq(ctx)) throw Napi::RangeError::New(env, "Target.logitGap: context overflow");
    if (busy.load()) throw Napi::Error::New(env, "Target.logitGap: a call is already in flight");
    auto* worker = new TargetLogitGapWorker(env, this, std::move(tokens), promptLength, a, b);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

Napi::Value Target::Dispose(const Napi::CallbackInfo& info) {
    if (busy.load()) throw Napi::Error::New(info.Env(), "Target.dispose: a call is in flight");
    freeModel();
    return info.Env().Undefined();
}

void Target::Init(Napi::Env env, Napi::Object exports) {
    Napi::Function cls = DefineClass(env, "Target",
                                     {InstanceMethod("load", &Target::Load), InstanceMethod("info", &Target::Info),
                                      InstanceMethod("evaluate", &Target::Evaluate), InstanceMethod("generate", &Target::Generate),
                                      InstanceMethod("logitGap", &Target::LogitGap), InstanceMethod("dispose", &Target::Dispose)});
    exports.Set("Target", cls);
}

}  // namespace

Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
    Target::Init(env, exports);
    return Engine::Init(env, exports);
}

NODE_API_MODULE(specdraft_engine, InitModule)
