/**
 * The serving-time sample: windows of W continuation tokens spread evenly from the opening to the end of each of the
 * first N conversations. A window starting at s is walked as a conversation with prompt P + C[0:s] and continuation
 * C[s:s+W], so the sample sees long contexts as the full walk does, at a fraction of its tokens.
 */
import type { Conversation } from "../validate/types.js";

/** How big the sample is. */
export interface SampleWindowOptions {
    /** Conversations sampled (the first N). */
    conversations: number;
    /** Tokens per window (W). */
    windowTokens: number;
    /** Windows per conversation at most (fewer when the continuation is short). */
    windowsPerConversation: number;
}

/** The sample's windows, each a conversation of its own (id `<id>@<start>`). */
export function sampleWindows(conversations: readonly Conversation[], options: SampleWindowOptions): Conversation[] {
    const windows: Conversation[] = [];
    for (const conversation of conversations.slice(0, options.conversations)) {
        const continuation = conversation.continuationTokens;
        const length = continuation.length;
        if (length === 0) continue;
        const width = Math.min(options.windowTokens, length);
        // as many windows as fit without overlap, up to the cap; starts spread from 0 to L − W
        const count = Math.max(1, Math.min(options.windowsPerConversation, Math.floor(length / width)));
        for (let j = 0; j < count; j++) {
            const start = count === 1 ? 0 : Math.round((j * (length - width)) / (count - 1));
            const window: Conversation = {
                id: `${conversation.id}@${start}`,
                promptTokens: conversation.promptTokens.concat(continuation.slice(0, start)),
                continuationTokens: continuation.slice(start, start + width),
                lineNumber: conversation.lineNumber,
            };
            if (conversation.category !== undefined) window.category = conversation.category;
            windows.push(window);
        }
    }
    return windows;
}
