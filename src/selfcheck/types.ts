/** Gates of `specdraft selfcheck` and its options. */

/** The gates in the order they run. */
export const gateNames = [
    "prerequisites",
    "size",
    "startup",
    "smoke",
    "serving time",
    "failures",
    "healthy after walk",
] as const;
/** One gate's name. */
export type GateName = (typeof gateNames)[number];

/** One gate's verdict. */
export interface GateResult {
    name: GateName;
    /** false also when the gate could not run (e.g. smoke after a failed startup). */
    ok: boolean;
    /** The measured figure, or why it failed. */
    figure: string;
}

/** What `specdraft selfcheck` is given. */
export interface SelfcheckOptions {
    /** The drafter folder. */
    dir: string;
    /** Held-out JSONL walked for the serving-time gate. */
    data: string;
    /** Largest folder, every byte of it. Defaults to `1000000000` (drafterFolder.ts: defaultMaxFolderBytes). */
    maxBytes?: number;
    /** Seconds serve.sh may take until GET /health answers 200. Defaults to `300`. */
    startupTimeoutSeconds?: number;
    /** Serving seconds allowed for the whole held-out set. Defaults to `10800`. */
    budgetSeconds?: number;
    /** Walk the whole set instead of projecting from a sample. Defaults to `false`. */
    full?: boolean;
    /** Sample: the first N conversations. Defaults to `16`. */
    sampleConversations?: number;
    /** Sample: tokens per window (W). Defaults to `64`. */
    windowTokens?: number;
    /** Sample: windows per conversation at most. Defaults to `4`. */
    windowsPerConversation?: number;
    /** Conversations walked at once. Defaults to `32`. */
    concurrency?: number;
    /** Draft length k. Defaults to architecture.json's draft_length, else `16`. */
    draftLength?: number;
    /** Per-request timeout. Defaults to `30000` ms. */
    timeoutMs?: number;
    /** Failed draft requests allowed. Defaults to `0`. */
    maxFailures?: number;
    /** Extra environment for serve.sh (e.g. SPECDRAFT). Defaults to none. */
    env?: NodeJS.ProcessEnv;
    /**
     * Run serve.sh as on a bare host: from a copy of the folder elsewhere, with only `env` and a PATH of the few tools
     * a bundled serve.sh needs (cleanEnvTools: no node), an empty HOME and a fresh TMPDIR. Defaults to `false`.
     */
    cleanEnv?: boolean;
}

/** What a clean environment's PATH holds: what a bundled serve.sh needs from the host (xz, or python3 without it). */
export const cleanEnvTools = ["bash", "tar", "xz", "mkdir", "mktemp", "mv", "rm"] as const;

/** The defaults SelfcheckOptions documents, for the command's help (the size cap: drafterFolder.ts). */
export const defaultStartupTimeoutSeconds = 300;
export const defaultBudgetSeconds = 10_800;
export const defaultSampleConversations = 16;
export const defaultWindowTokens = 64;
export const defaultWindowsPerConversation = 4;
export const defaultMaxFailures = 0;
