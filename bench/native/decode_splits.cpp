// Do a sequence's logits depend on how its tokens were split into decodes? For a model and seeded token streams:
// decode a P-token prompt, then G more tokens in chunks of `a`, and again in chunks of `b` (a fresh context each, no
// flash attention, one thread: the draft engine's CPU settings), and compare the logits after the last token bit for
// bit. With --tensors, also name the first graph tensor (in evaluation order) whose row for the last token differs.
// Built and run by bench/decodeSplits.sh; prints one JSON line per seed.
//
//   decode_splits MODEL BINS_DIR P G SEED A B [--tensors]
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

// The last token's slice of every F32 tensor the graph computes, in evaluation order (only while `on`).
struct Capture {
    bool on = false;
    std::vector<std::string> names;
    std::vector<std::array<int64_t, 4>> shapes;
    std::vector<std::vector<float>> data;
};

bool observe(ggml_tensor* t, bool ask, void* user) {
    auto* c = (Capture*)user;
    if (ask) return c->on;
    if (!c->on || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return true;
    std::vector<float> all(ggml_nelements(t));
    ggml_backend_tensor_get(t, all.data(), 0, ggml_nbytes(t));
    c->names.push_back(t->name);
    c->shapes.push_back({t->ne[0], t->ne[1], t->ne[2], t->ne[3]});
    c->data.push_back(std::move(all));
    return true;
}

// Decodes tokens[0, P) then [P, P + G) in chunks of `chunk`; returns the logits after the last token.
std::vector<float> run(llama_model* model, const std::vector<llama_token>& tokens, int P, int chunk, Capture* capture) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2048;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    if (capture) {
        cp.cb_eval = observe;
        cp.cb_eval_user_data = capture;
    }
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_batch batch = llama_batch_init(512, 0, 1);
    const int total = (int)tokens.size();
    auto decode = [&](int from, int n) {
        batch.n_tokens = n;
        for (int j = 0; j < n; ++j) {
            batch.token[j] = tokens[from + j];
            batch.pos[j] = from + j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = j == n - 1;
        }
        if (capture) capture->on = from + n == total;
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llama_decode failed\n");
            exit(1);
        }
    };
    decode(0, P);
    for (int i = P; i < total; i += chunk) decode(i, std::min(chunk, total - i));
    const int nVocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const float* logits = llama_get_logits_ith(ctx, -1);
    std::vector<float> out(logits, logits + nVocab);
    llama_batch_free(batch);
    llama_free(ctx);
    return out;
}

// The first tensor whose last-token row differs between the two captures (rows found by the dimension that is 1 token
// in one and n tokens in the other), or "".
std::string firstDifference(const Capture& x, const Capture& y, int chunkX, int chunkY, int G) {
    std::map<std::string, int> seenX, seenY;
    std::map<std::string, size_t> indexX;
    for (size_t i = 0; i < x.names.size(); ++i) indexX[x.names[i] + "#" + std::to_string(seenX[x.names[i]]++)] = i;
    const int lastX = (G - 1) % chunkX + 1, lastY = (G - 1) % chunkY + 1;  // tokens in each path's last decode
    for (size_t j = 0; j < y.names.size(); ++j) {
        const std::string key = y.names[j] + "#" + std::to_string(seenY[y.names[j]]++);
        auto found = indexX.find(key);
        if (found == indexX.end()) continue;
        const auto& a = x.data[found->second];
        const auto& sa = x.shapes[found->second];
        const auto& b = y.data[j];
        const auto& sb = y.shapes[j];
        int dim = -1;
        bool comparable = true;
        for (int k = 0; k < 4; ++k) {
            if (sa[k] == sb[k]) continue;
            if (sa[k] == lastX && sb[k] == lastY && dim < 0) dim = k;
            else comparable = false;
        }
        if (!comparable) continue;
        std::array<int64_t, 4> shape = sa;
        if (dim >= 0) shape[dim] = 1;
        int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
        for (int64_t e = 0; e < count; ++e) {
            int64_t idx[4], r = e;
            for (int k = 0; k < 4; ++k) {
                idx[k] = r % shape[k];
                r /= shape[k];
            }
            auto at = [&](const std::array<int64_t, 4>& s, int64_t last) {
                int64_t f = 0, mul = 1;
                for (int k = 0; k < 4; ++k) {
                    f += (k == dim ? last - 1 : idx[k]) * mul;
                    mul *= s[k];
                }
                return f;
            };
            if (a[at(sa, lastX)] != b[at(sb, lastY)]) return y.names[j];
        }
    }
    return "";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: decode_splits MODEL BINS_DIR P G SEED A B [--tensors]\n");
        return 2;
    }
    const int P = atoi(argv[3]), G = atoi(argv[4]), seed = atoi(argv[5]), a = atoi(argv[6]), b = atoi(argv[7]);
    const bool tensors = argc > 8 && strcmp(argv[8], "--tensors") == 0;
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    ggml_backend_load_all_from_path(argv[2]);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const int nVocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<llama_token> tokens;
    for (int i = 0; i < P + G; ++i) tokens.push_back((llama_token)((i * 7919 + seed * 131) % (nVocab - 10) + 10));
    Capture ca, cb;
    const std::vector<float> la = run(model, tokens, P, a, tensors ? &ca : nullptr);
    const std::vector<float> lb = run(model, tokens, P, b, tensors ? &cb : nullptr);
    double maxDiff = 0;
    for (int v = 0; v < nVocab; ++v) maxDiff = std::max(maxDiff, (double)std::fabs(la[v] - lb[v]));
    printf("{\"seed\": %d, \"prompt\": %d, \"tokens\": %d, \"chunks\": [%d, %d], \"max_logit_difference\": %g", seed, P, G, a, b, maxDiff);
    if (tensors) printf(", \"first_differing_tensor\": \"%s\"", firstDifference(ca, cb, a, b, G).c_str());
    printf("}\n");
    llama_model_free(model);
    return 0;
}
