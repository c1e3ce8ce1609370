/**
 * Where the app finds the engine. The server listens before the model is loaded, so the slot starts empty
 * (`loading`), holds the engine once it is warmed up (`ok`), and turns `stopping` on shutdown.
 */

import type { DraftEngine } from "../engine/types.js";
import { type ApiError, apiError } from "./errors.js";
import { retryAfterSeconds } from "./serveDefaults.js";

export type SlotStatus = "loading" | "ok" | "stopping";

export class EngineSlot {
    private engine: DraftEngine | undefined;
    private stopping = false;

    get status(): SlotStatus {
        if (this.stopping) return "stopping";
        return this.engine === undefined ? "loading" : "ok";
    }

    /** The engine, if loaded (also while stopping, so in-flight work can finish). */
    get loaded(): DraftEngine | undefined {
        return this.engine;
    }

    /** Puts a loaded, warmed-up engine in the slot: requests are served from now on. */
    fill(engine: DraftEngine): void {
        this.engine = engine;
    }

    /** New requests get 503 shutting_down from now on; in-flight ones keep their engine. */
    stop(): void {
        this.stopping = true;
    }

    /** The engine for a new request, or the 503 error that explains why there is none. */
    require(): DraftEngine {
        if (this.stopping) throw this.unavailable();
        if (this.engine === undefined) throw this.unavailable();
        return this.engine;
    }

    private unavailable(): ApiError {
        if (this.stopping) return apiError("shutting_down");
        return apiError("model_loading", {}, { "retry-after": String(retryAfterSeconds) });
    }
}
