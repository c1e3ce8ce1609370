/**
 * Reads a held-out JSONL file into conversations, keeping every rejected line's number and reason instead of failing
 * on it. Blank lines are skipped; a repeated id is rejected (the first one wins) so per-conversation figures stay
 * unambiguous.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { parseHeldOutLine } from "./parseHeldOutLine.js";
import type { Conversation, RejectedLine } from "./types.js";

export interface HeldOutSet {
    conversations: Conversation[];
    rejected: RejectedLine[];
}

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
            rejected.push({ lineNumber, message: `duplicate id ${JSON.stringify(parsed.conversation.id)} (first on line ${firstLine})` });
            continue;
        }
        firstLineOfId.set(parsed.conversation.id, lineNumber);
        conversations.push(parsed.conversation);
    }
    lines.close();
    return { conversations, rejected };
}
