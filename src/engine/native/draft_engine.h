// specdraft's native draft loop: one llama.cpp context holding many sequences, driven in decode STEPS. The Engine's
// load, info, submit and dispose are in draft_engine.cpp, its run worker (the steps) in draft_run.cpp; the same addon
// holds generate's Target (target.cpp), and native_shared.h what the two share.
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
// of all outputs are fetched on one thread first (argmaxOfRows in native_shared.h), and only then is argmax split over
// threads. `unguardedLogits` turns the guard off, only so a test can show that it is needed; `arrivalOrder` (also for
// tests) batches requests in arrival order, which makes llama.cpp reorder outputs and so exposes the race.
//
// JS interface (see src/engine/nativeAddon.ts for the typed view):
//   const engine = new Engine();
//   await engine.load({ binsDir, modelPath, streams, contextSize, batchSize, ubatchSize, gpuLayers, flashAttention,
//                       kvUnified, backendSampling, kvType, padBatch, threads, unguardedLogits, arrivalOrder, stepPrefill,
//                       lookahead, lookaheadStepTokens, lookaheadFill, verbose })
//       (every option is required, a missing or mistyped one is a TypeError: the defaults live in TypeScript)
//   engine.info()  -> { vocabSize, contextSizePerSequence, gpuDevice }
//   await engine.run(arrivals, cancelIds, maxSteps, onProgress)
//       -> { finished: [{ id, draft, cached, evaluated }], steps: Float64Array, active }
//       (maxSteps > 0 ends the run after that many steps even with requests in flight: the old loop, for comparison)
//       onProgress({ finished, steps }) is called mid-call when drafts finish; `steps` holds 12 numbers per decode
//       step: tokens, sequences, decode ms (llama_decode + llama_synchronize), sample ms (fetching the outputs +
//       argmax), host ms (time since the previous step ended: batch building, and for a call's first step the JS
//       round trip when requests were left in flight; idle time without requests is not counted), compute graphs
//       llama.cpp reused (not rebuilt; a CUDA graph can only be replayed for a reused graph), submit ms (the
//       llama_decode call alone: on a GPU the host's part — graph reuse or rebuild, inputs, kernel or CUDA-graph
//       launch — while the device may already run), wait ms (llama_synchronize: the rest of the device's work), draft
//       tokens the step produced, candidate positions it decoded (EngineState::lookahead), of those fillers, and the
//       candidates kept
//   engine.submit(arrivals, cancelIds) -> true when the run in flight took them (at its next step); false when no run is
//       live (none started, or it is ending): pass them to the next run() instead
//   engine.dispose()
#pragma once

#include <atomic>

#include "native_shared.h"
#include "prompt_lookup.h"

namespace specdraft {

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

struct EngineState : LlamaHandles {
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
    // Candidates (0: none): each drafting sequence's frontier token — the one whose output is its next draft token —
    // is followed in the same decode by up to `lookahead` guesses of the tokens after it (prompt lookup over the
    // sequence's own tokens, prompt_lookup.h), each with an output; the guesses that equal the drafter's own greedy
    // tokens are kept with the greedy token after the last of them, the rest leave the KV cache. A step of S sequences
    // gives each min(lookahead, lookaheadStepTokens / S − 1) candidates (the step's token budget shared), and with
    // `lookaheadFill` always that many, fillers where the lookup has fewer, so the steps keep one shape (one ubatch;
    // llama.cpp's and ggml-cuda's graph reuse).
    int32_t lookahead = 0;
    int32_t lookaheadStepTokens = 0;
    bool lookaheadFill = false;
    std::vector<PromptLookup> slotHistory;  // each slot's tokens (valid KV, then the pending draft token) and index
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
    int32_t drafted = 0;       // draft tokens the step produced
    int32_t candidates = 0;    // candidate positions decoded (lookup guesses and fillers)
    int32_t fillers = 0;       // of those, fillers
    int32_t accepted = 0;      // candidates kept: equal to the drafter's greedy token
};

// Numbers per step sent to JS (src/engine/nativeAddon.ts: nativeStepFields).
constexpr int32_t stepStatFields = 12;

// What a run sends to JS mid-call: drafts that finished, and the counters of the steps since the last message.
struct RunProgress {
    std::vector<DraftItem> finished;
    std::vector<StepStat> steps;
};

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
    llama_flash_attn_type flashAttention = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    bool kvUnified = false;
    int32_t threads = 0;  // 0: llama.cpp's own thread count
    bool unguardedLogits = false;
    bool arrivalOrder = false;
    bool backendSampling = false;
    double padBatch = 0;  // fraction of the streams that must draft for a step to be padded to all; 0: off
    std::string kvType;  // KV cache element type: f16, q8_0, bf16, f32; empty: llama.cpp's (f16)
    int32_t stepPrefill = 0;  // see EngineState::stepPrefill; 0: off
    int32_t lookahead = 0;    // see EngineState::lookahead; 0: off
    int32_t lookaheadStepTokens = 0;
    bool lookaheadFill = false;
    bool verbose = false;
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
        state.release();
        for (llama_sampler* smpl : state.samplers) llama_sampler_free(smpl);
        state.slotHistory.clear();
        state.samplers.clear();
        state.samplerConfigs.clear();
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

// Starts a run of decode steps off the JS thread (draft_run.cpp); the promise settles when the run ends.
Napi::Promise startRun(Napi::Env env, Engine* engine, std::vector<DraftItem> arrivals, std::vector<int32_t> cancels,
                       int32_t maxSteps, Napi::Function onProgress);

}  // namespace specdraft
