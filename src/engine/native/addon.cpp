// The addon's module: the draft Engine (draft_engine.h) and generate's Target (src/generate/native/target.cpp).

#include "native_shared.h"

namespace {

Napi::Object initModule(Napi::Env env, Napi::Object exports) {
    specdraft::registerTarget(env, exports);
    specdraft::registerEngine(env, exports);
    return exports;
}

}  // namespace

NODE_API_MODULE(specdraft_engine, initModule)
