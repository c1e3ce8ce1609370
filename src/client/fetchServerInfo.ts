/**
 * `GET /info` of a specdraft server (src/server/routes/infoRoutes.ts): what its drafter is, as far as its clients check
 * it before they send drafts — the vocabulary (generate and validate refuse another fingerprint than their data's) and
 * the context a sequence holds (validate refuses conversations that would overflow it).
 */
import { withTrailingSlash } from "./withTrailingSlash.js";

/**
 * `/info`'s `lookahead` as a client reads it (`step_tokens` in the JSON): the server's engine settings
 * (LookaheadSettings in src/engine/types.ts) as they come over the wire. Written out here so the client imports nothing
 * from the engine and runs against any server (src/server/schemas/infoSchemas.ts describes the JSON).
 */
export interface ServerLookahead {
    /** Prompt-lookup guesses per sequence and step at most; 0: off. */
    candidates: number;
    /** The step's token budget across its sequences. */
    stepTokens: number;
    /** Whether every step decodes that many positions (fillers where the lookup has fewer). */
    fill: boolean;
}

/** The fields of `GET /info` a client relies on. */
export interface ServerInfo {
    model: string;
    vocabSize: number;
    /** sha256 hex of the drafter's token list (src/engine/gguf.ts vocabFingerprint). */
    vocabFingerprint: string;
    /** The weights' quantization, e.g. `Q4_0`, when the server says. */
    quantization?: string;
    /** Tokens one sequence holds, prompt + draft, when the server says. */
    contextSize?: number;
    /** Its drafter steps' prompt-lookup candidates (docs/engine.md), when the server says (servers before them do not). */
    lookahead?: ServerLookahead;
}

/** Why `/info` gave nothing usable: no connection (the server is not there), a non-2xx status, or another shape. */
export type ServerInfoFailure = "network" | "http" | "malformed";

/** Thrown by fetchServerInfo; the message says what failed, `kind` which way. */
export class ServerInfoError extends Error {
    override name = "ServerInfoError";
    constructor(
        message: string,
        readonly kind: ServerInfoFailure,
    ) {
        super(message);
    }
}

/** The drafter's description from `{baseUrl}/info`; throws ServerInfoError naming what failed. */
export async function fetchServerInfo(baseUrl: string, timeoutMs: number): Promise<ServerInfo> {
    const url = new URL("info", withTrailingSlash(baseUrl)).href;
    let response: Response;
    try {
        response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    } catch (error) {
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        throw new ServerInfoError(
            `GET ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`,
            "network",
        );
    }
    const text = await response.text();
    if (!response.ok) throw new ServerInfoError(`GET ${url}: HTTP ${response.status}: ${text.slice(0, 200)}`, "http");
    let body: unknown;
    try {
        body = JSON.parse(text);
    } catch {
        throw new ServerInfoError(`GET ${url}: answer is not JSON: ${text.slice(0, 80)}`, "malformed");
    }
    const info = (body ?? {}) as Record<string, unknown>;
    if (typeof info.vocab_fingerprint !== "string" || typeof info.vocab_size !== "number")
        throw new ServerInfoError(
            `GET ${url}: expected "vocab_fingerprint" (string) and "vocab_size" (number), found ${text.slice(0, 120)}`,
            "malformed",
        );
    return {
        model: typeof info.model === "string" ? info.model : "?",
        vocabSize: info.vocab_size,
        vocabFingerprint: info.vocab_fingerprint,
        quantization: typeof info.quantization === "string" ? info.quantization : undefined,
        contextSize: typeof info.context_size === "number" ? info.context_size : undefined,
        lookahead: readLookahead(info.lookahead),
    };
}

function readLookahead(value: unknown): ServerLookahead | undefined {
    const { candidates, step_tokens: stepTokens, fill } = (value ?? {}) as Record<string, unknown>;
    return typeof candidates === "number" && typeof stepTokens === "number" && typeof fill === "boolean"
        ? { candidates, stepTokens, fill }
        : undefined;
}
