// The target of `specdraft generate`: one sequence of a target model, for speculative generation
// (src/generate/NativeTarget.ts; its typed view src/generate/nativeTargetAddon.ts). Only generate uses it, so it lives
// here; it is compiled into the one native addon with the draft engine (src/engine/native: the module, addon.cpp, and
// what both classes share, native_shared.h), since llama.cpp's backends and log are set up once per process.
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
//   await target.replay(tokens: Int32Array, calls: Int32Array, row) -> Float32Array: the logits of token `row` of the
//         last call after decoding `calls` ([keep, count, outputFrom, outputTo] each, their tokens one after another in
//         `tokens`) as evaluate() decodes them, in a context of its own
//   target.dispose()
// `stats` (targetStatFields numbers): llama_decode calls, tokens decoded, submit ms (the llama_decode calls), wait ms
// (llama_synchronize after each), read ms (fetching the sampled ids or the argmax over logits), graphs llama.cpp reused.

#include <atomic>

#include "../../engine/native/native_shared.h"

namespace specdraft {

namespace {

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

// One call of a replay: the cache trimmed to `keep` cells, `count` tokens decoded after them, outputs for indices
// [outputFrom, outputTo) of those tokens.
struct ReplayCall {
    int32_t keep;
    int32_t count;
    int32_t outputFrom;
    int32_t outputTo;
};

// Fills `batch` with tokens[0..count) of the one sequence at positions pos, pos+1, ..., outputs for indices
// [outputFrom, outputTo).
void fillBatch(llama_batch& batch, const llama_token* tokens, int32_t count, int32_t pos, int32_t outputFrom, int32_t outputTo) {
    for (int32_t j = 0; j < count; ++j) {
        batch.token[j] = tokens[j];
        batch.pos[j] = pos + j;
        batch.n_seq_id[j] = 1;
        batch.seq_id[j][0] = 0;
        batch.logits[j] = j >= outputFrom && j < outputTo ? 1 : 0;
    }
    batch.n_tokens = count;
}

class Target : public Napi::ObjectWrap<Target>, public LlamaHandles {
public:
    static void Init(Napi::Env env, Napi::Object exports);
    explicit Target(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Target>(info) {}
    ~Target() override { freeModel(); }

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
        release();
        if (sampler) llama_sampler_free(sampler);
        sampler = nullptr;
        loaded = false;
    }

    // Decodes tokens[0..count) at positions pos, pos+1, ... with outputs from index firstOutput on (count: none);
    // appends their greedy next tokens to `next`.
    void decode(const llama_token* tokens, int32_t count, int32_t pos, int32_t firstOutput, std::vector<llama_token>& next,
                TargetStats& stats) {
        fillBatch(batch, tokens, count, pos, firstOutput, count);
        const int32_t reusedBefore = llama_perf_context(ctx).n_reused;
        const Clock::time_point start = Clock::now();
        decodeOrThrow(ctx, batch);
        const Clock::time_point submitted = Clock::now();
        llama_synchronize(ctx);
        const Clock::time_point decoded = Clock::now();
        if (backendSampling) {
            for (int32_t j = firstOutput; j < count; ++j) next.push_back(sampledToken(ctx, j));
        } else if (count > firstOutput) {
            // every row fetched on this thread first, then the argmax of the rows split over threads (native_shared.h)
            std::vector<int32_t> indices(count - firstOutput);
            for (int32_t k = 0; k < count - firstOutput; ++k) indices[k] = firstOutput + k;
            argmaxOfRows(ctx, indices, nVocab, argmaxThreads, next, next.size());
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

    // Decodes `calls` one after another in a context of its own, created with this target's parameters but without
    // samplers (so logits reach the host): each call trims the cache to its first `keep` cells and decodes its `count`
    // tokens (the next ones of `tokens`) in batch-sized chunks with outputs for indices [outputFrom, outputTo), exactly
    // as evaluate() decodes a call with outputs from outputFrom on; returns the logits of index `row` of the last call.
    // llama.cpp's results depend on how tokens are split into decodes and which rows are outputs, so decoding a run's
    // calls again gives the logits that run computed.
    std::vector<float> replay(const std::vector<llama_token>& tokens, const std::vector<ReplayCall>& calls, int32_t row) {
        llama_context* c = llama_init_from_model(model, baseParams);
        if (!c) throw std::runtime_error("llama.cpp could not create a context: " + orUnknown(takeLoggedErrors()));
        llama_batch b = llama_batch_init(batchCapacity, 0, 1);
        struct Release {
            llama_context* c;
            llama_batch* b;
            ~Release() {
                llama_batch_free(*b);
                llama_free(c);
            }
        } release{c, &b};
        std::vector<float> logits;
        size_t next = 0;  // the call's first token in `tokens`
        for (size_t i = 0; i < calls.size(); ++i) {
            const ReplayCall& call = calls[i];
            if (!llama_memory_seq_rm(llama_get_memory(c), 0, call.keep, -1)) throw std::runtime_error("could not trim the KV cache");
            for (int32_t offset = 0; offset < call.count; offset += batchCapacity) {
                const int32_t chunk = std::min(batchCapacity, call.count - offset);
                const int32_t from = std::clamp(call.outputFrom - offset, 0, chunk);
                const int32_t to = std::clamp(call.outputTo - offset, 0, chunk);
                fillBatch(b, tokens.data() + next + offset, chunk, call.keep + offset, from, to);
                decodeOrThrow(c, b);
                if (i + 1 == calls.size() && row >= offset && row < offset + chunk) {
                    const float* values = llama_get_logits_ith(c, row - offset);
                    if (!values) throw std::runtime_error("llama.cpp returned no logits");
                    logits.assign(values, values + nVocab);
                }
            }
            next += call.count;
        }
        return logits;
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
    Napi::Value Replay(const Napi::CallbackInfo& info);
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
            t.loadModel(options_.modelPath, options_.gpuLayers);

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
            t.baseParams = cp;  // without samplers: replay() makes contexts of its own from it
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
            t.createContext(cp);
            const llama_vocab* vocab = llama_model_get_vocab(t.model);
            t.maxOutputs = options_.maxOutputs;
            t.argmaxThreads = hostArgmaxThreads();
            t.length = 0;
            t.isEog.assign(t.nVocab, false);
            t.eogIds.clear();
            for (llama_token id = 0; id < t.nVocab; ++id) {
                if (llama_vocab_is_eog(vocab, id)) {
                    t.isEog[id] = true;
                    t.eogIds.push_back(id);
                }
            }
            t.gpuDevice = gpuDeviceName(options_.gpuLayers);
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

class TargetReplayWorker : public TargetWorker {
public:
    TargetReplayWorker(Napi::Env env, Target* target, std::vector<llama_token> tokens, std::vector<ReplayCall> calls, int32_t row)
        : TargetWorker(env, target), tokens_(std::move(tokens)), calls_(std::move(calls)), row_(row) {}

protected:
    void work() override { logits_ = target_->replay(tokens_, calls_, row_); }
    Napi::Value result(Napi::Env env) override {
        Napi::Float32Array a = Napi::Float32Array::New(env, logits_.size());
        std::copy(logits_.begin(), logits_.end(), a.Data());
        return a;
    }

private:
    std::vector<llama_token> tokens_;
    std::vector<ReplayCall> calls_;
    int32_t row_;
    std::vector<float> logits_;
};

Napi::Value Target::Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (loaded || busy.load()) throw Napi::Error::New(env, "Target.load: already loaded");
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "Target.load(options): options object expected");
    Napi::Object o = info[0].As<Napi::Object>();
    TargetOptions opt;
    opt.binsDir = getString(o, "binsDir");
    opt.modelPath = getString(o, "modelPath");
    opt.contextSize = getIntAtLeast(o, "contextSize", 2);
    opt.batchSize = getIntAtLeast(o, "batchSize", 1);
    opt.ubatchSize = getIntAtLeast(o, "ubatchSize", 1);
    opt.gpuLayers = getInt(o, "gpuLayers");
    opt.flashAttention = getFlashAttention(o, "flashAttention");
    opt.backendSampling = getBool(o, "backendSampling");
    opt.maxOutputs = getIntAtLeast(o, "maxOutputs", 1);
    opt.threads = getIntAtLeast(o, "threads", 0);
    const bool verbose = getBool(o, "verbose");
    if (opt.maxOutputs > opt.batchSize) throw Napi::RangeError::New(env, "Target.load: maxOutputs must not exceed batchSize");
    setVerbose(verbose);
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

// replay(tokens, calls, row): every call is checked as evaluate() checks one, against the cache the calls before it
// leave, so a bad call is refused before anything is decoded.
Napi::Value Target::Replay(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!loaded) throw Napi::Error::New(env, "Target.replay: not loaded");
    if (info.Length() < 3 || !info[1].IsTypedArray() || !info[2].IsNumber() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
        throw Napi::TypeError::New(env, "Target.replay(tokens: Int32Array, calls: Int32Array, row: number) expected");
    }
    std::vector<llama_token> tokens = readTokens(env, info[0], "Target.replay");
    Napi::Int32Array flat = info[1].As<Napi::Int32Array>();
    const int32_t row = info[2].As<Napi::Number>().Int32Value();
    if (flat.ElementLength() == 0 || flat.ElementLength() % 4 != 0) {
        throw Napi::RangeError::New(env, "Target.replay: calls must hold [keep, count, outputFrom, outputTo] for each of ≥ 1 calls");
    }
    std::vector<ReplayCall> calls;
    int64_t length = 0;  // tokens in the cache after the calls so far
    int64_t total = 0;
    const int64_t nCtx = (int64_t)llama_n_ctx_seq(ctx);
    for (size_t i = 0; i < flat.ElementLength(); i += 4) {
        const ReplayCall call{flat[i], flat[i + 1], flat[i + 2], flat[i + 3]};
        const std::string which = "Target.replay: call " + std::to_string(i / 4) + ": ";
        if (call.keep < 0 || call.keep > length) {
            throw Napi::RangeError::New(env, which + "keep " + std::to_string(call.keep) + ": expected 0 ≤ keep ≤ " + std::to_string(length));
        }
        if (call.count < 1 || call.keep + (int64_t)call.count > nCtx) throw Napi::RangeError::New(env, which + "expected 1 … the context's free cells of tokens");
        if (call.outputFrom < 0 || call.outputFrom >= call.outputTo || call.outputTo > call.count || call.outputTo - call.outputFrom > maxOutputs) {
            throw Napi::RangeError::New(env, which + "expected outputs 0 ≤ outputFrom < outputTo ≤ count, at most " + std::to_string(maxOutputs));
        }
        length = call.keep + call.count;
        total += call.count;
        calls.push_back(call);
    }
    if (total != (int64_t)tokens.size()) {
        throw Napi::RangeError::New(env, "Target.replay: the calls decode " + std::to_string(total) + " tokens, tokens holds " +
                                             std::to_string(tokens.size()));
    }
    const ReplayCall& last = calls.back();
    if (row < last.outputFrom || row >= last.outputTo) throw Napi::RangeError::New(env, "Target.replay: row must be an output of the last call");
    if (busy.load()) throw Napi::Error::New(env, "Target.replay: a call is already in flight");
    auto* worker = new TargetReplayWorker(env, this, std::move(tokens), std::move(calls), row);
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
                                      InstanceMethod("replay", &Target::Replay), InstanceMethod("dispose", &Target::Dispose)});
    exports.Set("Target", cls);
}

}  // namespace

void registerTarget(Napi::Env env, Napi::Object exports) { Target::Init(env, exports); }

}  // namespace specdraft
