// The draft Engine's run (draft_engine.h): a worker off the JS thread that does decode steps back to back, taking
// what submit() put in its inbox before each, and sends finished drafts to JS as they finish.

#include "draft_engine.h"

namespace specdraft {

namespace {

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
        decodeOrThrow(s.ctx, s.batch);
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
        if (s.backendSampling) {
            for (int32_t k = 0; k < count; ++k) next[k] = sampledToken(s.ctx, outputIndices[k]);
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
            // the guard (native_shared.h): every row fetched on this thread, then the argmax over threads
            argmaxOfRows(s.ctx, outputIndices, s.nVocab, s.argmaxThreads, next, 0);
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

}  // namespace

Napi::Promise startRun(Napi::Env env, Engine* engine, std::vector<DraftItem> arrivals, std::vector<int32_t> cancels,
                       int32_t maxSteps, Napi::Function onProgress) {
    auto* worker = new RunWorker(env, engine, std::move(arrivals), std::move(cancels), maxSteps, onProgress);
    Napi::Promise promise = worker->Promise();
    worker->Queue();
    return promise;
}

}  // namespace specdraft
