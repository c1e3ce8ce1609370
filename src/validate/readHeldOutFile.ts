/**
 * Reads a held-out JSONL file into conversations, keeping every rejected line's number and reason instead of failing
 * on it. Blank lines are skipped; a repeated id is rejected (the first one wins) so per-conversation figures stay
 * unambiguous. A line is `{"id": str, "category"?: str, "prompt_tokens": [int], "continuation_tokens": [int]}`.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import type { Conversation, RejectedLine } from "./types.js";

/** The valid conversations of a file, in file order, and the lines that were not. */
export interface HeldOutSet {
    conversations: Conversation[];
    rejected: RejectedLine[];
}

/** How much of the file to keep. */
export interface ReadHeldOutOptions {
    /** Keep only the first `limit` valid conversations. Defaults to all of them. */
    limit?: number;
}

/** Reads `file` line by line (it may be large). Throws only when the file cannot be read. */
export async function readHeldOutFile(file: string, options: ReadHeldOutOptions = {}): Promise<HeldOutSet> {
    const limit = options.limit ?? Number.POSITIVE_INFINITY;
    const conversations: Conversation[] = [];
    const rejected: RejectedLine[] = [];
    const firstLineOfId = new Map<string, number>();
    const lines = createInterface({ input: createReadStream(file, { encoding: "utf8" }), crlfDelay: Infinity });
    let lineNumber = 0;
    for await (const line of lines) {
        lineNumber++;
        if (conversations.length >= limit) break;
        if (line.trim().length === 0) continue;
        const parsed = parseHeldOutLine(line, lineNumber);
        if (!parsed.ok) {
            rejected.push({ lineNumber, message: parsed.message });
            continue;
        }
        const firstLine = firstLineOfId.get(parsed.conversation.id);
        if (firstLine !== undefined) {
            rejected.push({
                lineNumber,
                message: `duplicate id ${JSON.stringify(parsed.conversation.id)} (first on line ${firstLine})`,
            });
            continue;
        }
        firstLineOfId.set(parsed.conversation.id, lineNumber);
        conversations.push(parsed.conversation);
    }
    lines.close();
    return { conversations, rejected };
}

type ParsedHeldOutLine = { ok: true; conversation: Conversation } | { ok: false; message: string };

/**
 * Parses `text` (one JSONL line, without its newline) found at 1-based `lineNumber`. Never throws: a bad line comes
 * back with a message saying what was expected and what was found.
 */
function parseHeldOutLine(text: string, lineNumber: number): ParsedHeldOutLine {
    let value: unknown;
    try {
        value = JSON.parse(text);
    } catch (error) {
        return { ok: false, message: `not JSON (${(error as Error).message})` };
    }
    if (typeof value !== "object" || value === null || Array.isArray(value))
        return { ok: false, message: `expected a JSON object, found ${describe(value)}` };
    const record = value as Record<string, unknown>;

    if (typeof record.id !== "string" || record.id.length === 0)
        return { ok: false, message: `"id": expected a non-empty string, found ${describe(record.id)}` };
    if (record.category !== undefined && typeof record.category !== "string")
        return { ok: false, message: `"category": expected a string, found ${describe(record.category)}` };

    const prompt = checkTokenList(record.prompt_tokens, "prompt_tokens");
    if (typeof prompt === "string") return { ok: false, message: prompt };
    // The first draft request is for the prompt alone, and a server cannot draft after nothing.
    if (prompt.length === 0) return { ok: false, message: `"prompt_tokens": expected at least one token, found []` };
    const continuation = checkTokenList(record.continuation_tokens, "continuation_tokens");
    if (typeof continuation === "string") return { ok: false, message: continuation };

    const conversation: Conversation = {
        id: record.id,
        promptTokens: prompt,
        continuationTokens: continuation,
        lineNumber,
    };
    if (record.category !== undefined) conversation.category = record.category as string;
    return { ok: true, conversation };
}

/** The token ids, or a message naming the first bad element. */
function checkTokenList(value: unknown, field: string): number[] | string {
    if (!Array.isArray(value)) return `"${field}": expected an array of token ids, found ${describe(value)}`;
    for (let i = 0; i < value.length; i++) {
        const id: unknown = value[i];
        if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0)
            return `"${field}"[${i}]: expected an integer ≥ 0, found ${describe(id)}`;
    }
    return value as number[];
}

function describe(value: unknown): string {
    if (value === undefined) return "nothing";
    const json = JSON.stringify(value);
    return json.length > 40 ? `${json.slice(0, 40)}…` : json;
}
