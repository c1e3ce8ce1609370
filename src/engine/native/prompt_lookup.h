// Prompt lookup over one sequence's own tokens, for the draft loop's candidates (draft_run.cpp): the tokens of a
// KV slot (its cached context, then the draft so far) and an index of their 1-, 2- and 3-grams, so that "what followed
// the most recent earlier occurrence of the last 3 (else 2, else 1) tokens" is a hash lookup, not a scan.
//
// The index is kept incrementally: appending a token indexes the n-grams that end right before it (they now have a
// follower), and truncating undoes exactly that, newest first, through a per-position link to the previous occurrence
// of the same n-gram. A slot's next request usually keeps its whole cached prefix, so a step costs O(new tokens), and a
// rejected draft's tail costs O(its length) to drop. Candidates only ever come from the slot's own tokens, which are
// the request's own context and draft: nothing is stored across slots or requests of other conversations.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "llama.h"

namespace specdraft {

class PromptLookup {
public:
    // Token ids must be below this: an n-gram of up to 3 of them is packed into one 64-bit key.
    static constexpr int64_t maxVocab = int64_t(1) << 21;
    static constexpr int32_t maxN = 3;

    size_t size() const { return tokens_.size(); }
    const std::vector<llama_token>& tokens() const { return tokens_; }

    // Appends `token`; the n-grams ending at its position get it as their follower.
    void push(llama_token token) {
        const int32_t end = (int32_t)tokens_.size();
        for (int32_t n = 1; n <= maxN; ++n) {
            std::vector<int32_t>& prev = prev_[n - 1];
            if (end < n) {
                prev.push_back(notIndexed);
                continue;
            }
            auto [it, inserted] = head_[n - 1].try_emplace(key(end, n), end);
            prev.push_back(inserted ? none : it->second);
            it->second = end;
        }
        tokens_.push_back(token);
    }

    // Drops the tokens from `length` on, restoring the index as it was before they were pushed.
    void truncate(size_t length) {
        if (length >= tokens_.size()) return;
        if (length == 0) {
            clear();
            return;
        }
        for (int32_t end = (int32_t)tokens_.size() - 1; end >= (int32_t)length; --end) {
            for (int32_t n = 1; n <= maxN; ++n) {
                const int32_t before = prev_[n - 1][end];
                if (before == notIndexed) continue;
                auto it = head_[n - 1].find(key(end, n));
                if (before == none) head_[n - 1].erase(it);
                else it->second = before;
            }
        }
        tokens_.resize(length);
        for (std::vector<int32_t>& prev : prev_) prev.resize(length);
    }

    void clear() {
        tokens_.clear();
        for (int32_t n = 0; n < maxN; ++n) {
            head_[n].clear();
            prev_[n].clear();
        }
    }

    // Up to `count` guesses of the tokens after the current ones, into `out`; returns how many (0 when the last
    // tokens never occurred before). The guess: what followed the most recent earlier occurrence of the last 3 tokens,
    // else 2, else 1. Where that continuation reaches the current end, it goes on as the repetition it found (the
    // tokens since the occurrence, again): what the next lookups would propose once these guesses were accepted.
    int32_t propose(int32_t count, llama_token* out) const {
        const int32_t length = (int32_t)tokens_.size();
        for (int32_t n = maxN; n >= 1; --n) {
            if (length < n + 1) continue;
            auto it = head_[n - 1].find(key(length, n));
            if (it == head_[n - 1].end()) continue;
            const int32_t from = it->second;       // tokens_[from - n, from) equals the last n tokens
            const int32_t period = length - from;  // ≥ 1: the occurrence ends before the current end
            for (int32_t i = 0; i < count; ++i) out[i] = tokens_[from + i % period];
            return count;
        }
        return 0;
    }

private:
    static constexpr int32_t none = -1;        // the first occurrence of its n-gram
    static constexpr int32_t notIndexed = -2;  // fewer than n tokens before this position

    // The n tokens before position `end`, packed (21 bits each).
    uint64_t key(int32_t end, int32_t n) const {
        uint64_t k = 0;
        for (int32_t i = end - n; i < end; ++i) k = (k << 21) | (uint64_t)(uint32_t)tokens_[i];
        return k;
    }

    std::vector<llama_token> tokens_;
    // per n: the most recent position whose preceding n tokens are that n-gram (and that has a token at it)
    std::unordered_map<uint64_t, int32_t> head_[maxN];
    // per n and position: the previous head of that position's n-gram (none / notIndexed)
    std::vector<int32_t> prev_[maxN];
};

}  // namespace specdraft
