/**
 * What validate checks about a server before walking against it, from its `GET /info`: that it is there, that its
 * drafter speaks the data's token ids (its `vocab_fingerprint` against the one the data's reference stage recorded in
 * its manifest.json beside the data), and that every conversation fits the context one of its sequences holds (the
 * walk's last request holds P + C[:L−1] and asks for k more). A protocol without `/info` (llama-server) is walked
 * unchecked, and says so.
 */
import { readFile } from "node:fs/promises";
import path from "node:path";
import { ServerInfoError } from "../client/fetchServerInfo.js";
import type { DraftClient } from "../client/types.js";
import { sha256File } from "../pack/sha256File.js";
import type { Conversation } from "./types.js";

/** The vocabulary the data was made in: its target's fingerprint, and the file that says so. */
export interface DataVocabulary {
    fingerprint: string;
    source: string;
}

/** Why a server is not walked: not there, another vocabulary, or conversations longer than its context. */
export interface ServerProblem {
    kind: "unreachable" | "vocabulary" | "context";
    message: string;
}

/**
 * The data's vocabulary, from the `manifest.json` of the stage that wrote it (train/'s reference: `vocab_fingerprint`),
 * when that manifest lists the file with its current sha256; undefined otherwise (data from elsewhere, or changed
 * since), and validate then checks no vocabulary.
 */
export async function readDataVocabulary(dataFile: string): Promise<DataVocabulary | undefined> {
    const source = path.join(path.dirname(dataFile), "manifest.json");
    let manifest: { outputs?: Record<string, { sha256?: unknown }>; vocab_fingerprint?: unknown };
    try {
        manifest = JSON.parse(await readFile(source, "utf8"));
    } catch {
        return undefined;
    }
    const listed = manifest.outputs?.[path.basename(dataFile)]?.sha256;
    if (typeof manifest.vocab_fingerprint !== "string" || typeof listed !== "string") return undefined;
    if (listed !== (await sha256File(dataFile))) return undefined;
    return { fingerprint: manifest.vocab_fingerprint, source };
}

/** The conversations a context of `contextSize` tokens cannot walk with `draftLength`-token drafts. */
function conversationsOverContext(
    conversations: readonly Conversation[],
    contextSize: number,
    draftLength: number,
): { conversation: Conversation; needs: number }[] {
    return conversations
        .map((conversation) => ({
            conversation,
            needs:
                conversation.promptTokens.length +
                Math.max(conversation.continuationTokens.length - 1, 0) +
                draftLength,
        }))
        .filter(({ needs }) => needs > contextSize);
}

/** Checks `client`'s server against the data; returns the problem that stops the walk, and notes to print. */
export async function checkServer(
    client: DraftClient,
    conversations: readonly Conversation[],
    draftLength: number,
    data: { file: string; vocabulary: DataVocabulary | undefined },
): Promise<{ problem?: ServerProblem; notes: string[] }> {
    const label = `${client.name} (${client.url})`;
    if (client.info === undefined)
        return { notes: [`${client.name}: its protocol has no GET /info: vocabulary and context not checked`] };
    let info: Awaited<ReturnType<NonNullable<DraftClient["info"]>>>;
    try {
        info = await client.info();
    } catch (error) {
        if (error instanceof ServerInfoError && error.kind === "network")
            return {
                problem: { kind: "unreachable", message: `${label}: ${error.message}: is it running?` },
                notes: [],
            };
        // a server that drafts without describing itself: walk it, but say what went unchecked
        return { notes: [`${client.name}: ${(error as Error).message}: vocabulary and context not checked`] };
    }
    const notes: string[] = [];
    const { vocabulary } = data;
    if (vocabulary === undefined)
        notes.push(
            `${client.name}: no vocabulary fingerprint for ${data.file} (no reference manifest beside it): not checked`,
        );
    else if (vocabulary.fingerprint !== info.vocabFingerprint)
        return {
            problem: {
                kind: "vocabulary",
                message:
                    `${client.name}: vocabulary fingerprint ${info.vocabFingerprint.slice(0, 16)}…, the data's ` +
                    `(${vocabulary.source}) ${vocabulary.fingerprint.slice(0, 16)}…: its drafter's token ids mean other ` +
                    "text than the data's; serve a drafter built on the target's tokenizer",
            },
            notes,
        };
    else notes.push(`${client.name}: vocabulary fingerprint ${info.vocabFingerprint.slice(0, 12)}… matches the data's`);
    if (info.contextSize !== undefined) {
        const over = conversationsOverContext(conversations, info.contextSize, draftLength);
        if (over.length > 0) {
            const worst = over.reduce((a, b) => (b.needs > a.needs ? b : a));
            const c = worst.conversation;
            return {
                problem: {
                    kind: "context",
                    message:
                        `${client.name}: ${over.length} of ${conversations.length} conversations need more than its context of ` +
                        `${info.contextSize} tokens (the longest, ${data.file}:${c.lineNumber} (${JSON.stringify(c.id)}): ` +
                        `${c.promptTokens.length} prompt + ${c.continuationTokens.length} continuation tokens, the last ` +
                        `request holding ${worst.needs} with a ${draftLength}-token draft): serve with --context ` +
                        `${worst.needs} or more, or leave them out`,
                },
                notes,
            };
        }
    }
    return { notes };
}
