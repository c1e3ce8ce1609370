/**
 * The layout of a packed drafter folder (`specdraft pack` writes it, `specdraft selfcheck` runs it):
 *
 *     DIR/serve.sh            starts `specdraft serve` on $PORT
 *     DIR/architecture.json   what the model is (ArchitectureFile below)
 *     DIR/data_manifest.json  what it was trained on (dataManifest.ts)
 *     DIR/<model>.gguf        the drafter
 *     DIR/runtime/specdraft-runtime.tar.xz   with `pack --bundle` only: node, specdraft and llama.cpp (bundleRuntime.ts)
 *
 * and the size it must fit: every byte of every file in it, at most defaultMaxFolderBytes unless told otherwise.
 */

/** File names inside the folder, and the `format` architecture.json carries. */
export const serveScriptName = "serve.sh";
export const architectureFileName = "architecture.json";
export const dataManifestFileName = "data_manifest.json";
export const runtimeArchiveName = "runtime/specdraft-runtime.tar.xz";
export const drafterFolderFormat = "specdraft-drafter/1";

/**
 * The real job's cap on a drafter folder, every byte of it: `specdraft pack --max-bytes` and selfcheck's size gate.
 * Defaults to `1000000000` (10^9 bytes, as the job states it, not 1 GiB).
 */
export const defaultMaxFolderBytes = 1_000_000_000;

/** What a bundled folder carries to run without node or specdraft on the host (architecture.json's `runtime`). */
export interface RuntimeDescription {
    /** The archive's path inside the folder (runtimeArchiveName). */
    file: string;
    /** The archive's size: what the runtime costs of the folder's cap. */
    bytes: number;
    /** Its files' size once serve.sh has unpacked them (outside the folder). */
    unpacked_bytes: number;
    sha256: string;
    /** `process.version` of the bundled node, e.g. `v20.20.2`. */
    node: string;
    /** Whether its symbol table and debug sections were stripped (binutils' strip was there). */
    node_stripped: boolean;
    /** Platform it runs on, e.g. `linux-x64`. */
    platform: string;
    /** Native engine builds inside: always `cpu`, plus any `--bundle-gpu`. */
    backends: string[];
}

/** architecture.json. */
export interface ArchitectureFile {
    format: typeof drafterFolderFormat;
    /** The GGUF's file name inside the folder. */
    model_file: string;
    model_name: string | null;
    /** `general.architecture`, e.g. `qwen3`. */
    architecture: string;
    /** The model the drafter was trained from (its starting checkpoint, e.g. Qwen/Qwen3-1.7B), pinned to a revision. */
    base_model: { name: string; revision: string | null } | null;
    /** The file's quantization, e.g. `Q4_0`, by the rule `GET /info` reports (src/engine/gguf.ts: ggufQuantization). */
    quantization: string;
    file_type: string | null;
    /** Tokens drafted per request by default (serve.sh passes it as --draft-len). */
    draft_length: number;
    /**
     * Prompt-lookup candidates per drafter step the folder serves with (serve.sh passes it as --lookahead; 0: off), or
     * null for serve's default for the backend it runs on. Drafts are the drafter's greedy continuation either way.
     */
    lookahead: number | null;
    vocab_size: number;
    /** sha256 hex of JSON.stringify(tokenizer.ggml.tokens): must equal the target's. */
    vocab_fingerprint: string;
    context_length: number | null;
    embedding_length: number | null;
    block_count: number | null;
    feed_forward_length: number | null;
    head_count: number | null;
    head_count_kv: number | null;
    parameters: number;
    /** The model file's size. */
    size_bytes: number;
    /** The bundled runtime (`pack --bundle`), or null when serve.sh relies on specdraft installed on the host. */
    runtime: RuntimeDescription | null;
    model_sha256: string;
    packed_by: string;
    packed_at: string;
}

/** Checks the fields a grader relies on; returns the file or a message naming the first problem. */
export function checkArchitectureFile(value: unknown): ArchitectureFile | string {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return "expected a JSON object";
    const a = value as Record<string, unknown>;
    for (const field of ["model_file", "architecture", "quantization", "vocab_fingerprint"] as const)
        if (typeof a[field] !== "string" || (a[field] as string).length === 0)
            return `"${field}": expected a non-empty string`;
    if (!/^[0-9a-f]{64}$/.test(a.vocab_fingerprint as string))
        return `"vocab_fingerprint": expected 64 lowercase hex digits`;
    if ((a.model_file as string).includes("/") || (a.model_file as string).startsWith("."))
        return `"model_file": expected a file name inside the folder`;
    for (const field of ["draft_length", "vocab_size", "size_bytes"] as const)
        if (typeof a[field] !== "number" || !Number.isInteger(a[field]) || (a[field] as number) < 1)
            return `"${field}": expected an integer ≥ 1`;
    if (
        a.lookahead !== undefined &&
        a.lookahead !== null &&
        !(Number.isInteger(a.lookahead) && (a.lookahead as number) >= 0)
    )
        return `"lookahead": expected an integer ≥ 0 or null`;
    const base = a.base_model;
    if (
        base !== null &&
        base !== undefined &&
        (typeof base !== "object" || typeof (base as Record<string, unknown>).name !== "string")
    )
        return `"base_model": expected {"name", "revision"} or null`;
    return value as ArchitectureFile;
}
