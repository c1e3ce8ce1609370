/** Writes test conversations as held-out JSONL (the format `specdraft validate --data` reads). */
import { writeFile } from "node:fs/promises";
import type { Conversation } from "../../src/validate/types.js";

export async function writeHeldOut(
    file: string,
    conversations: readonly Conversation[],
    extraLines: readonly string[] = [],
): Promise<void> {
    const lines = conversations.map((c) =>
        JSON.stringify({
            id: c.id,
            ...(c.category !== undefined ? { category: c.category } : {}),
            prompt_tokens: c.promptTokens,
            continuation_tokens: c.continuationTokens,
        }),
    );
    await writeFile(file, `${[...lines, ...extraLines].join("\n")}\n`);
}
