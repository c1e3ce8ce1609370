// The draft Engine's run (draft_engine.h): a worker off the JS thread that does decode steps back to back, taking
// what submit() put in its inbox before each, and sends finished drafts to JS as they finish.

#include "draft_engine.h"

namespace specdraft {

namespace {

// ---- run: decode steps back to back ----
//
// One step = one llama_decode: every drafting request adds its last draft token, requests that just arrived add their
// new tokens (prefill; as many as the batch holds, the rest next step), and with candidates (EngineState::lookahead)
// each frontier token is followed by its guesses, checked against the greedy outputs after the decode. A run repeats
// steps, taking what submit() put in its inbox before each, until nothing is in flight (or `maxSteps` steps ran).

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
    Napi::Float64Array stats = Napi::Float64Array::New(env, steps.size() * stepStatFields);
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepStat& st = steps[i];
        const double row[stepStatFields] = {(double)st.tokens, (double)st.sequences, st.decodeMs, st.sampleMs, st.hostMs,
                                            (double)st.graphsReused, st.submitMs, st.waitMs, (double)st.drafted,
                                            (double)st.candidates, (double)st.fillers, (double)st.accepted};
        std::copy(row, row + stepStatFields, stats.Data() + i * stepStatFields);
    }
    result.Set("finished", list);
    result.Set("steps", stats);
    return result;
}

// A frontier of a step: a sequence's token whose output is its next draft token, and the candidates decoded after it.
struct Frontier {
    DraftItem* item;
    size_t firstOutput;     // index in the step's outputs of its output; its candidates' outputs follow
    int32_t slots;          // candidate positions decoded after it
    size_t firstCandidate;  // index in the step's candidate tokens of its candidates
    int32_t proposed;       // of those, guesses by prompt lookup (the rest are fillers)
};

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
            for (PromptLookup& history : engine_->state.slotHistory) history.clear();
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
        planStep();
        const int32_t sequences = buildBatch();
        if (s.batch.n_tokens > 0) {
            StepStat stat;
            stat.hostMs = msBetween(hostSince, Clock::now());
            stat.tokens = s.batch.n_tokens;
            stat.sequences = sequences;
            decode(outputIndices_, next_, stat);
            for (const Frontier& f : frontiers_) accept(f, stat);
            // what the step decoded past each sequence's kept tokens (rejected candidates, fillers) leaves its cache
            llama_memory_t mem = llama_get_memory(s.ctx);
            for (DraftItem* it : trimAfter_) llama_memory_seq_rm(mem, it->slot, it->cached, -1);
            for (DraftItem* it : order_) s.slotLength[it->slot] = it->cached;
            steps.push_back(stat);
        }
        collectFinished(finished);
        s.lastStepEnd = Clock::now();
        s.lastLeftActive = !s.active.empty();
    }

    // The step's sequences in batch order (order_), each one's share of the batch (take), whether it is padded to every
    // stream (pad_) and the candidates each drafting sequence gets (perSequence_).
    void planStep() {
        EngineState& s = engine_->state;
        // batch in slot order: with per-sequence KV llama.cpp splits a batch into ubatches of consecutive sequence ids
        order_.clear();
        for (DraftItem& it : s.active) {
            if (!it.done) order_.push_back(&it);
        }
        if (!s.arrivalOrder) {
            std::stable_sort(order_.begin(), order_.end(), [](const DraftItem* a, const DraftItem* b) { return a->slot < b->slot; });
        }
        // padding: only steps of one token per drafting sequence (no prefill) with enough sequences drafting
        const int32_t count = (int32_t)order_.size();
        pad_ = s.padMinSequences > 0 && !s.arrivalOrder && count >= s.padMinSequences && count < s.streams;
        for (DraftItem* it : order_) pad_ = pad_ && (it->tokens.size() - it->offset <= 1 || it->stepwise);
        // the step's token budget shared by its sequences (a padded step holds every stream), one token each their own
        const int32_t stepSequences = pad_ ? s.streams : count;
        const int32_t m = s.lookahead > 0 && stepSequences > 0
            ? std::max(0, std::min(s.lookahead, s.lookaheadStepTokens / stepSequences - 1))
            : 0;
        perSequence_ = m;
        // drafting requests get their token (and room for its candidates) first; prefills share what is left of the
        // batch, a prefill that ends in this step keeping room for the candidates after its last token
        int32_t budget = s.batchCapacity;
        for (DraftItem* it : order_) {
            if (it->offset == it->tokens.size() || it->stepwise) budget -= 1 + m;
        }
        for (DraftItem* it : order_) {
            if (it->offset == it->tokens.size() || it->stepwise) {
                it->take = 1;
                continue;
            }
            const size_t left = it->tokens.size() - it->offset;
            it->take = (int32_t)std::min<size_t>(left, (size_t)std::max(0, budget - m));
            budget -= it->take + ((size_t)it->take == left ? m : 0);
        }
        // a prefill split over steps leaves the step with several tokens of a sequence: no padding then
        for (DraftItem* it : order_) pad_ = pad_ && it->take == 1;
    }

    // Fills the batch: every sequence's tokens in slot order (throwaway ones for idle slots when padded), each
    // frontier token (the one whose output is the next draft token) followed by its candidates. Returns the sequences
    // with tokens of their own.
    int32_t buildBatch() {
        EngineState& s = engine_->state;
        s.batch.n_tokens = 0;
        outputIndices_.clear();
        frontiers_.clear();
        candidateTokens_.clear();
        trimAfter_.clear();
        const int32_t m = perSequence_;
        const int32_t nCtxSeq = (int32_t)llama_n_ctx_seq(s.ctx);
        llama_memory_t mem = llama_get_memory(s.ctx);
        padSlots_.clear();
        size_t nextReal = 0;
        for (int32_t slot = 0; pad_ && slot < s.streams; ++slot) {
            if (nextReal < order_.size() && order_[nextReal]->slot == slot) {
                ++nextReal;
                continue;
            }
            // an idle slot: throwaway tokens right after its valid prefix (what a previous padding left is removed),
            // as many as a drafting sequence has, outputs included, so every step has the same shape
            const int32_t pos = s.slotLength[slot];
            if (pos + m >= nCtxSeq) continue;
            llama_memory_seq_rm(mem, slot, pos, -1);
            padSlots_.push_back(slot);
        }
        auto addPadding = [&](int32_t slot) {
            for (int32_t j = 0; j <= m; ++j) addOutput(0, s.slotLength[slot] + j, slot);
        };
        size_t nextPad = 0;
        int32_t sequences = 0;
        for (DraftItem* it : order_) {
            // throwaway tokens of idle slots below this item's slot come first (the batch stays in slot order)
            for (; nextPad < padSlots_.size() && padSlots_[nextPad] < it->slot; ++nextPad) addPadding(padSlots_[nextPad]);
            if (it->take == 0) continue;
            ++sequences;
            if (it->offset == it->tokens.size()) {
                addFrontier(it, it->draft.back(), it->cached, m, nCtxSeq);
            } else {
                for (int32_t j = 0; j < it->take; ++j) {
                    const llama_token token = it->tokens[it->offset + j];
                    if (it->offset + j + 1 == it->tokens.size()) {
                        addFrontier(it, token, it->cached + j, m, nCtxSeq);
                    } else if (it->stepwise) {
                        // a stepwise prefill asks for an output at every token, so the step has a drafting step's
                        // shape; with candidates it also takes as many fillers as a drafting sequence has candidates
                        addOutput(token, it->cached + j, it->slot);
                        const int32_t fill = s.lookaheadFill ? std::min(m, nCtxSeq - 1 - (it->cached + j)) : 0;
                        for (int32_t c = 1; c <= fill; ++c) addOutput(token, it->cached + j + c, it->slot);
                        if (fill > 0) trimAfter_.push_back(it);
                        it->evaluated += fill;
                    } else {
                        addToken(token, it->cached + j, it->slot, false);
                    }
                }
                it->offset += it->take;
            }
            it->cached += it->take;
            it->evaluated += it->take;
        }
        for (; nextPad < padSlots_.size(); ++nextPad) addPadding(padSlots_[nextPad]);
        return sequences;
    }

    void addOutput(llama_token token, llama_pos pos, llama_seq_id seq) {
        outputIndices_.push_back(engine_->state.batch.n_tokens);
        addToken(token, pos, seq, true);
    }

    // The token whose output is `it`'s next draft token, at `pos`, and after it up to m candidates for the tokens that
    // follow: guesses by prompt lookup over the sequence's own tokens, as many as the draft still has room for (its
    // last token is the step's own), then with lookaheadFill fillers up to m, so that every drafting sequence has the
    // same number of tokens (one ubatch, one graph shape). Outputs at all of them.
    void addFrontier(DraftItem* it, llama_token token, int32_t pos, int32_t m, int32_t nCtxSeq) {
        EngineState& s = engine_->state;
        Frontier f{it, outputIndices_.size(), 0, candidateTokens_.size(), 0};
        addOutput(token, pos, it->slot);
        const int32_t room = std::min(m, nCtxSeq - 1 - pos);
        if (room > 0) {
            const int32_t useful = std::min(room, it->n - (int32_t)it->draft.size() - 1);
            candidateTokens_.resize(f.firstCandidate + room, token);  // fillers: the frontier token again
            if (useful > 0) f.proposed = s.slotHistory[it->slot].propose(useful, candidateTokens_.data() + f.firstCandidate);
            f.slots = s.lookaheadFill ? room : f.proposed;
            candidateTokens_.resize(f.firstCandidate + f.slots);
            for (int32_t c = 0; c < f.slots; ++c) addOutput(candidateTokens_[f.firstCandidate + c], pos + 1 + c, it->slot);
            it->evaluated += f.slots;
            if (f.slots > 0) trimAfter_.push_back(it);
        }
        frontiers_.push_back(f);
    }

    // Takes the drafter's greedy token after the frontier, then after each candidate that equals the greedy token
    // before it (so its KV and output are the greedy sequence's), until a candidate differs or the draft is complete.
    void accept(const Frontier& f, StepStat& stat) {
        EngineState& s = engine_->state;
        DraftItem* it = f.item;
        int32_t kept = 0;
        llama_token token = next_[f.firstOutput];
        while (true) {
            it->draft.push_back(token);
            if (s.lookahead > 0) s.slotHistory[it->slot].push(token);
            ++stat.drafted;
            if ((int32_t)it->draft.size() >= it->n || token == it->endId) {
                it->done = true;
                break;
            }
            if (kept == f.slots || candidateTokens_[f.firstCandidate + kept] != token) break;
            ++kept;
            token = next_[f.firstOutput + kept];
        }
        it->cached += kept;
        stat.candidates += f.slots;
        stat.fillers += f.slots - f.proposed;
        stat.accepted += kept;
    }

    // Moves finished requests out of the active list; their slots may be given to new requests from now on.
    void collectFinished(std::vector<DraftItem>& finished) {
        std::vector<DraftItem>& active = engine_->state.active;
        bool any = false;
        for (auto it = active.begin(); it != active.end();) {
            if (it->done) {
                // a slot's history holds what its cache holds: the draft's last token never went through a decode
                if (!engine_->state.slotHistory.empty()) engine_->state.slotHistory[it->slot].truncate(it->cached);
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
            if (s.lookahead > 0) {
                PromptLookup& history = s.slotHistory[it.slot];
                // the history holds the slot's cached tokens, so it keeps the same prefix; should it know fewer, the
                // lookup starts afresh from the new tokens (candidates are guesses: a poorer history costs only speed)
                if (history.size() < (size_t)it.keep) history.clear();
                history.truncate(it.keep);
                for (llama_token token : it.tokens) history.push(token);
            }
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
    // the step being built: its sequences, whether padded, candidates per sequence, outputs, frontiers
    std::vector<DraftItem*> order_;
    bool pad_ = false;
    int32_t perSequence_ = 0;
    std::vector<int32_t> outputIndices_;
    std::vector<Frontier> frontiers_;
    std::vector<llama_token> candidateTokens_;
    std::vector<DraftItem*> trimAfter_;  // sequences with tokens decoded past what they keep
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
