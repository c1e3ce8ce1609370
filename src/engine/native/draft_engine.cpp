// The draft Engine's N-API methods (see draft_engine.h for the whole interface): load (a worker off the JS thread),
// info, the checks on arrivals that run() and submit() share, submit, dispose. The run itself is in draft_run.cpp.

#include "draft_engine.h"

namespace specdraft {

namespace {

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

            s.loadModel(options_.modelPath, options_.gpuLayers);

            llama_context_params cp = llama_context_default_params();
            cp.n_seq_max = (uint32_t)options_.streams;
            cp.kv_unified = options_.kvUnified;
            // room for every sequence: split into n_ctx / n_seq_max cells per sequence, or shared when unified
            cp.n_ctx = (uint32_t)options_.contextSize * (uint32_t)options_.streams;
            cp.n_batch = (uint32_t)options_.batchSize;
            cp.n_ubatch = (uint32_t)std::min(options_.ubatchSize, options_.batchSize);
            // at most one output (the last token) per sequence per decode, and with candidates one more for each of
            // them, within the step's token budget (EngineState::lookahead): keeps the logits buffers small
            // (a step never carries more tokens than a decode takes: the budget is capped at the batch size)
            const int32_t stepTokens = std::min(options_.lookaheadStepTokens, options_.batchSize);
            const int32_t maxCandidates = options_.lookahead > 0 ? std::min(options_.lookahead, stepTokens - 1) : 0;
            const int64_t outputsMax = maxCandidates > 0
                ? std::max<int64_t>(options_.streams, std::min<int64_t>(stepTokens, (int64_t)options_.streams * (1 + maxCandidates)))
                : options_.streams;
            cp.n_outputs_max = (uint32_t)outputsMax;
            cp.flash_attn_type = options_.flashAttention;
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
                cp.n_outputs_max_per_seq = (uint32_t)(1 + std::max(0, maxCandidates));
                s.backendSampling = true;
            }
            if (options_.threads > 0) {
                cp.n_threads = options_.threads;
                cp.n_threads_batch = options_.threads;
            }
            s.createContext(cp);
            if (options_.lookahead > 0 && s.nVocab > PromptLookup::maxVocab) {
                throw std::runtime_error("lookahead candidates need a vocabulary below " + std::to_string(PromptLookup::maxVocab) +
                                         " tokens, this one has " + std::to_string(s.nVocab));
            }
            s.streams = options_.streams;
            engine_->slotBusy.assign(options_.streams, false);
            s.unguardedLogits = options_.unguardedLogits;
            s.arrivalOrder = options_.arrivalOrder;
            s.slotLength.assign(options_.streams, 0);
            s.stepPrefill = options_.stepPrefill;
            s.lookahead = options_.lookahead;
            s.lookaheadStepTokens = std::min(options_.lookaheadStepTokens, s.batchCapacity);
            s.lookaheadFill = options_.lookaheadFill;
            s.slotHistory.assign(options_.lookahead > 0 ? options_.streams : 0, PromptLookup());
            s.padMinSequences = options_.padBatch > 0
                ? std::max(1, (int32_t)std::ceil(options_.padBatch * options_.streams))
                : 0;
            s.argmaxThreads = hostArgmaxThreads();

            s.gpuDevice = gpuDeviceName(options_.gpuLayers);
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

}  // namespace

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
    opt.flashAttention = getFlashAttention(o, "flashAttention");
    opt.kvUnified = getBool(o, "kvUnified");
    opt.threads = getIntAtLeast(o, "threads", 0);
    opt.unguardedLogits = getBool(o, "unguardedLogits");
    opt.arrivalOrder = getBool(o, "arrivalOrder");
    opt.backendSampling = getBool(o, "backendSampling");
    opt.kvType = getString(o, "kvType");
    opt.stepPrefill = getIntAtLeast(o, "stepPrefill", 0);
    opt.lookahead = getIntAtLeast(o, "lookahead", 0);
    opt.lookaheadStepTokens = getIntAtLeast(o, "lookaheadStepTokens", 1);
    opt.lookaheadFill = getBool(o, "lookaheadFill");
    opt.padBatch = getNumber(o, "padBatch");
    if (!(opt.padBatch >= 0 && opt.padBatch <= 1)) {
        throw Napi::RangeError::New(env, "option padBatch: expected a fraction 0–1, got " + std::to_string(opt.padBatch));
    }
    opt.verbose = getBool(o, "verbose");
    setVerbose(opt.verbose);
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
    return startRun(env, this, std::move(items), std::move(cancels), maxSteps, info[3].As<Napi::Function>());
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

void registerEngine(Napi::Env env, Napi::Object exports) { Engine::Init(env, exports); }

}  // namespace specdraft
