/** Asks a specdraft server's `GET /info` for the drafter's vocabulary, to compare it with the target's. */
import { withTrailingSlash } from "../client/createSpecdraftClient.js";

export interface DrafterInfo {
    model: string;
    vocabSize: number;
    vocabFingerprint: string;
}

/** The server's model name and vocabulary. Throws with a message saying what failed (network, HTTP status, shape). */
export async function fetchDrafterInfo(baseUrl: string, timeoutMs: number): Promise<DrafterInfo> {
    const url = new URL("info", withTrailingSlash(baseUrl)).href;
    let response: Response;
    try {
        response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    } catch (error) {
        const cause = (error as { cause?: { code?: string } }).cause;
        throw new Error(`GET ${url}: ${cause?.code ?? (error as Error).message}`);
    }
    const text = await response.text();
    if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}: ${text.slice(0, 200)}`);
    let body: unknown;
    try {
        body = JSON.parse(text);
    } catch {
        throw new Error(`GET ${url}: answer is not JSON: ${text.slice(0, 80)}`);
    }
    const info = body as { model?: unknown; vocab_size?: unknown; vocab_fingerprint?: unknown };
    if (typeof info.vocab_fingerprint !== "string" || typeof info.vocab_size !== "number")
        throw new Error(`GET ${url}: expected "vocab_fingerprint" (string) and "vocab_size" (number), found ${text.slice(0, 120)}`);
    return { model: typeof info.model === "string" ? info.model : "?", vocabSize: info.vocab_size, vocabFingerprint: info.vocab_fingerprint };
}
