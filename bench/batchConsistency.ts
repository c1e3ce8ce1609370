/**
 * Does a draft depend on what else is in the batch? Asks a draft server for the drafts of `--streams` distinct
 * contexts one at a time, then for the same contexts all at once, and counts the drafts that differ. With `--peer URL`
 * it compares two servers instead (the same model under two settings, e.g. an engine knob): each context alone to
 * both, and counts the drafts that differ between them. The contexts are
 * seeded random ids, or with `--data` real text: the first `--context` tokens (prompt then continuation) of the first
 * `--streams` conversations of a held-out JSONL file.
 *
 *   node --import tsx bench/batchConsistency.ts --url http://127.0.0.1:8000 --streams 32 --context 512 [--data FILE]
 *       [--peer http://127.0.0.1:8001]
 *
 * Prints JSON: { requests, differing, differing_rate, first_difference }.
 */
import { Command } from "commander";
import { parseIntegerOption } from "../src/cli/commandOptions.js";
import { createDraftClient } from "../src/client/createDraftClient.js";
import { defaultDraftLength, defaultStreams } from "../src/engine/engineDefaults.js";
import { readHeldOutFile } from "../src/validate/readHeldOutFile.js";

const program = new Command("batchConsistency")
    .description("Count drafts that differ between a request alone and the same request in a concurrent batch.")
    .requiredOption("--url <url>", "http://host:port (specdraft /draft) or llama-server+http://host:port")
    .option("--streams <n>", "distinct contexts, and the batch size", parseIntegerOption(1), defaultStreams)
    .option("--context <tokens>", "tokens per context", parseIntegerOption(1), 512)
    .option("--draft-len <k>", "tokens per draft", parseIntegerOption(1), defaultDraftLength)
    .option("--vocab-size <n>", "ids are drawn below this", parseIntegerOption(2), 151_936)
    .option("--seed <n>", "seed of the random contexts", parseIntegerOption(0), 7)
    .option("--data <file>", "take the contexts from this held-out JSONL file instead of random ids")
    .option("--peer <url>", "compare each context's draft alone with this server's instead of with a batch")
    .action(
        async (options: {
            url: string;
            streams: number;
            context: number;
            draftLen: number;
            vocabSize: number;
            seed: number;
            data?: string;
            peer?: string;
        }) => {
            const client = createDraftClient(options.url, 120_000);
            const peer = options.peer === undefined ? undefined : createDraftClient(options.peer, 120_000);
            let state = options.seed >>> 0;
            const random = () => {
                // mulberry32: a seeded generator, so every peer gets the same contexts
                state = (state + 0x6d2b79f5) >>> 0;
                let t = state;
                t = Math.imul(t ^ (t >>> 15), t | 1);
                t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
                return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
            };
            const contexts =
                options.data === undefined
                    ? Array.from({ length: options.streams }, () =>
                          Array.from({ length: options.context }, () => Math.floor(random() * options.vocabSize)),
                      )
                    : (await readHeldOutFile(options.data, { limit: options.streams })).conversations.map((c) =>
                          [...c.promptTokens, ...c.continuationTokens].slice(0, options.context),
                      );
            if (contexts.length < options.streams)
                throw new Error(`${options.data}: ${contexts.length} conversations, --streams ${options.streams}`);
            const draftOf = async (context: number[], from = client): Promise<number[] | undefined> => {
                const outcome = await from.draft(context, options.draftLen);
                return outcome.ok ? outcome.draft : undefined;
            };
            const alone: (number[] | undefined)[] = [];
            for (const context of contexts) alone.push(await draftOf(context));
            const batched: (number[] | undefined)[] = [];
            if (peer === undefined) batched.push(...(await Promise.all(contexts.map((c) => draftOf(c)))));
            else for (const context of contexts) batched.push(await draftOf(context, peer));
            let differing = 0;
            let firstDifference: { stream: number; alone?: number[]; batched?: number[] } | undefined;
            for (let i = 0; i < contexts.length; i++) {
                if (JSON.stringify(alone[i]) !== JSON.stringify(batched[i])) {
                    differing++;
                    firstDifference ??= { stream: i, alone: alone[i], batched: batched[i] };
                }
            }
            process.stdout.write(
                `${JSON.stringify(
                    {
                        url: options.url,
                        ...(options.peer === undefined ? {} : { peer: options.peer }),
                        contexts: options.data ?? `random (seed ${options.seed})`,
                        requests: contexts.length,
                        context: options.context,
                        differing,
                        differing_rate: differing / contexts.length,
                        first_difference: firstDifference ?? null,
                    },
                    null,
                    2,
                )}\n`,
            );
        },
    );

await program.parseAsync();
