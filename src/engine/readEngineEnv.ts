/**
 * Engine settings from environment variables, so a benchmark run can flip them without new CLI flags (e.g. on the
 * GPU machine: `SPECDRAFT_KV_TYPE=q8_0 specdraft serve …`). An option passed to loadEngine wins over its variable.
 *
 *   SPECDRAFT_KV_TYPE=f16|q8_0|bf16|f32     KV cache element type (q8_0 halves the attention reads of long contexts)
 *   SPECDRAFT_BACKEND_SAMPLING=0|1         greedy sampling inside llama.cpp's graph
 *   SPECDRAFT_FLASH_ATTENTION=0|1          flash attention
 *   SPECDRAFT_UBATCH=<tokens>              tokens computed at once inside a decode
 *   SPECDRAFT_BATCH=<tokens>               tokens per llama_decode call
 *   SPECDRAFT_THREADS=<n>                  llama.cpp CPU threads
 *   SPECDRAFT_MAX_STEPS_PER_RUN=<n>        decode steps per native run (1: a JS round trip per step; 0: no limit)
 *   SPECDRAFT_PAD_BATCH=<fraction>         pad steps to all streams when this fraction drafts (0: never; e.g. 0.5)
 *   SPECDRAFT_STEP_PREFILL=<tokens>        feed arrivals of up to this many new tokens one per step (0: never)
 *   SPECDRAFT_LOOKAHEAD=<n>                prompt-lookup candidates per drafting sequence and step (0: off)
 *   SPECDRAFT_LOOKAHEAD_STEP_TOKENS=<n>    a step's token budget the candidates share
 *   SPECDRAFT_LOOKAHEAD_FILL=0|1           always decode that many candidate positions (fillers), one step shape
 *   SPECDRAFT_UNGUARDED_LOGITS=0|1         tests only: turn the logits reorder guard off (test/engine/logitsGuard.test.ts)
 *
 * `npm test` clears every SPECDRAFT_* variable but its own switches (test/helpers/isolateEnv.ts), so a developer's
 * shell does not change what the tests measure.
 */

/** The KV cache element types llama.cpp takes for both K and V here. */
export const kvTypes = ["f16", "q8_0", "bf16", "f32"] as const;
export type KvType = (typeof kvTypes)[number];

export interface EngineEnvSettings {
    kvType?: KvType;
    backendSampling?: boolean;
    flashAttention?: boolean;
    ubatchSize?: number;
    batchSize?: number;
    threads?: number;
    maxStepsPerRun?: number;
    padBatch?: number;
    stepPrefill?: number;
    lookahead?: number;
    lookaheadStepTokens?: number;
    lookaheadFill?: boolean;
    unguardedLogits?: boolean;
}

/** Reads the SPECDRAFT_* engine variables; throws a RangeError naming the variable for a value it cannot use. */
export function readEngineEnv(env: NodeJS.ProcessEnv = process.env): EngineEnvSettings {
    const settings: EngineEnvSettings = {};
    const kvType = env.SPECDRAFT_KV_TYPE;
    if (kvType !== undefined && kvType !== "") {
        if (!(kvTypes as readonly string[]).includes(kvType)) {
            throw new RangeError(
                `SPECDRAFT_KV_TYPE must be one of ${kvTypes.join(", ")}, got ${JSON.stringify(kvType)}.`,
            );
        }
        settings.kvType = kvType as KvType;
    }
    const flag = (name: string): boolean | undefined => {
        const value = env[name];
        if (value === undefined || value === "") return undefined;
        if (value !== "0" && value !== "1")
            throw new RangeError(`${name} must be 0 or 1, got ${JSON.stringify(value)}.`);
        return value === "1";
    };
    const integer = (name: string, min: number): number | undefined => {
        const value = env[name];
        if (value === undefined || value === "") return undefined;
        const parsed = Number(value);
        if (!/^\d+$/.test(value) || parsed < min)
            throw new RangeError(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(value)}.`);
        return parsed;
    };
    const assign = <K extends keyof EngineEnvSettings>(key: K, value: EngineEnvSettings[K] | undefined) => {
        if (value !== undefined) settings[key] = value;
    };
    assign("backendSampling", flag("SPECDRAFT_BACKEND_SAMPLING"));
    assign("flashAttention", flag("SPECDRAFT_FLASH_ATTENTION"));
    assign("unguardedLogits", flag("SPECDRAFT_UNGUARDED_LOGITS"));
    assign("ubatchSize", integer("SPECDRAFT_UBATCH", 1));
    assign("batchSize", integer("SPECDRAFT_BATCH", 1));
    assign("threads", integer("SPECDRAFT_THREADS", 1));
    assign("maxStepsPerRun", integer("SPECDRAFT_MAX_STEPS_PER_RUN", 0));
    assign("stepPrefill", integer("SPECDRAFT_STEP_PREFILL", 0));
    assign("lookahead", integer("SPECDRAFT_LOOKAHEAD", 0));
    assign("lookaheadStepTokens", integer("SPECDRAFT_LOOKAHEAD_STEP_TOKENS", 1));
    assign("lookaheadFill", flag("SPECDRAFT_LOOKAHEAD_FILL"));
    const pad = env.SPECDRAFT_PAD_BATCH;
    if (pad !== undefined && pad !== "") {
        const fraction = Number(pad);
        if (!/^\d*\.?\d+$/.test(pad) || fraction > 1)
            throw new RangeError(`SPECDRAFT_PAD_BATCH must be a fraction 0–1, got ${JSON.stringify(pad)}.`);
        settings.padBatch = fraction;
    }
    return settings;
}
