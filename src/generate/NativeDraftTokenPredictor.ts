/**
 * A TokenPredictor over specdraft's own draft engine loaded in this process (src/engine, one stream): each
 * `predictTokens()` is `engine.draft(everything so far, k)`, the engine keeping its KV cache for the shared prefix —
 * what `specdraft serve` does behind `POST /draft`, without HTTP. The greedy token of each step is the engine's
 * (in llama.cpp's graph on a GPU), and its steps keep one shape so ggml-cuda replays its CUDA graph.
 */
import type { Token } from "node-llama-cpp";
import type { DraftEngine } from "../engine/types.js";
import { StateTokenPredictor } from "./StateTokenPredictor.js";

export class NativeDraftTokenPredictor extends StateTokenPredictor {
    private readonly engine: DraftEngine;
    private readonly draftLength: number;
    private readonly eogIds: ReadonlySet<number>;

    /**
     * `engine` is used, not owned: the caller closes it. `draftLength` is k; a draft ends after the first of `eogIds`
     * (end-of-generation tokens), as a greedy draft model's does.
     */
    constructor(engine: DraftEngine, draftLength: number, eogIds: ReadonlySet<number>) {
        super();
        this.engine = engine;
        this.draftLength = draftLength;
        this.eogIds = eogIds;
    }

    async predictTokens(): Promise<Token[]> {
        const state = this.stateTokens;
        if (state.length === 0) return [];
        // never more than the drafter's context holds
        const length = Math.min(this.draftLength, this.engine.info.contextSize - state.length - 1);
        if (length <= 0) return [];
        const draft = await this.engine.draft(state, length);
        const end = draft.findIndex((token) => this.eogIds.has(token));
        return (end < 0 ? draft : draft.slice(0, end + 1)) as Token[];
    }
}
