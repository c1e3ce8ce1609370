/**
 * `specdraft selfcheck`: runs a packed drafter folder the way a grader would and checks each gate in turn —
 * prerequisites, size (every byte, and how much of the cap the model and a bundled runtime take), startup, smoke,
 * held-out serving time (full walk or projected from a sample), request failures, health after the walk — then stops
 * the server it started (its whole process group). With `cleanEnv` serve.sh runs from a copy of the folder in an
 * environment with no node and no specdraft (cleanEnvironment.ts), which a bundled folder must start in.
 */
import { existsSync } from "node:fs";
import { access, constants, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { createSpecdraftClient, defaultTimeoutMs } from "../client/createDraftClient.js";
import type { DraftClient, DraftFailureKind } from "../client/types.js";
import { defaultDraftLength } from "../engine/engineDefaults.js";
import { checkDataManifest } from "../pack/dataManifest.js";
import {
    type ArchitectureFile,
    architectureFileName,
    checkArchitectureFile,
    dataManifestFileName,
    defaultMaxFolderBytes,
    serveScriptName,
} from "../pack/drafterFolder.js";
import { describeLargestParts, folderBytes, formatByteCount } from "../pack/folderBytes.js";
import { specdraftRoot } from "../pack/packDrafter.js";
import type { HeldOutSet } from "../validate/readHeldOutFile.js";
import { summarizeWalk } from "../validate/summarizeWalk.js";
import type { WalkResult, WalkSummary } from "../validate/types.js";
import { defaultConcurrency, walkHeldOut } from "../validate/walkHeldOut.js";
import { type CleanEnvironment, makeCleanEnvironment } from "./cleanEnvironment.js";
import { sampleWindows } from "./sampleWindows.js";
import { findFreePort, healthStatus, type ServeProcess, startServeScript, waitForHealth } from "./startServeScript.js";
import {
    defaultBudgetSeconds,
    defaultMaxFailures,
    defaultSampleConversations,
    defaultStartupTimeoutSeconds,
    defaultWindowsPerConversation,
    defaultWindowTokens,
    type GateName,
    type GateResult,
    type SelfcheckOptions,
} from "./types.js";

/** Progress callbacks, for the command's output. */
export interface SelfcheckHooks {
    /** Each gate as soon as it is decided. */
    onGate?: (gate: GateResult) => void;
    /** The walk is about to start: `tokens` to walk. */
    onWalkStart?: (tokens: number, sampled: boolean) => void;
    /** A walk step advanced `advanced` tokens. */
    onWalkProgress?: (advanced: number, failure: DraftFailureKind | undefined) => void;
    onWalkEnd?: () => void;
}

/** Every gate's verdict; `ok` when all passed. */
export interface SelfcheckResult {
    ok: boolean;
    gates: GateResult[];
    /** τ measured on what was walked (the sample or the whole set), when the walk ran. */
    tau: number | null;
}

/** Runs every gate on `options.dir`, walking `heldOut` for the serving-time gate; stops the server it started. */
export async function runSelfcheck(
    options: SelfcheckOptions,
    heldOut: HeldOutSet,
    hooks: SelfcheckHooks = {},
): Promise<SelfcheckResult> {
    const gates: GateResult[] = [];
    const decide = (name: GateName, ok: boolean, figure: string): void => {
        const gate = { name, ok, figure };
        gates.push(gate);
        hooks.onGate?.(gate);
    };
    const notRun = (names: GateName[], why: string): void => {
        for (const name of names) decide(name, false, `not run: ${why}`);
    };

    const prerequisites = await checkPrerequisites(options.dir);
    const { architecture } = prerequisites;
    decide("prerequisites", prerequisites.ok, prerequisites.figure);
    const size = await checkSize(options.dir, architecture, options.maxBytes ?? defaultMaxFolderBytes);
    decide("size", size.ok, size.figure);

    if (!prerequisites.serveScriptRunnable) {
        notRun(
            ["startup", "smoke", "serving time", "failures", "healthy after walk"],
            `no runnable ${serveScriptName}`,
        );
        return finish(gates, null);
    }

    const dir = options.dir;
    const serveScript = path.join(dir, serveScriptName);
    const port = await findFreePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    let server: ServeProcess | undefined;
    let clean: CleanEnvironment | undefined;
    let tau: number | null = null;
    try {
        let where = "";
        if (options.cleanEnv) {
            clean = await makeCleanEnvironment(dir, options.env);
            server = startServeScript(path.join(clean.dir, serveScriptName), clean.dir, port, clean.env, false);
            where = ` in a clean environment (${clean.description})`;
        } else {
            const env = { ...options.env };
            const thisSpecdraft = path.join(specdraftRoot, "dist", "cli", "main.js");
            // a folder without its runtime runs on this machine's specdraft, as it would where one is installed
            const unset = (env.SPECDRAFT ?? process.env.SPECDRAFT) === undefined;
            if (!architecture?.runtime && unset && existsSync(thisSpecdraft)) {
                env.SPECDRAFT = `${process.execPath} ${thisSpecdraft}`;
                where = " with this specdraft (SPECDRAFT)";
            }
            server = startServeScript(serveScript, dir, port, env);
        }
        const startupLimit = options.startupTimeoutSeconds ?? defaultStartupTimeoutSeconds;
        const health = await waitForHealth(baseUrl, startupLimit, server);
        if (!health.healthy) {
            decide("startup", false, `${health.reason}${tailForMessage(server)}`);
            notRun(["smoke", "serving time", "failures", "healthy after walk"], "the server never became healthy");
            return finish(gates, null);
        }
        decide(
            "startup",
            true,
            `PORT=${port}: GET /health 200 after ${health.seconds.toFixed(1)} s (limit ${startupLimit} s)${where}`,
        );

        const draftLength = options.draftLength ?? architecture?.draft_length ?? defaultDraftLength;
        const client = createSpecdraftClient(baseUrl, {
            name: path.basename(path.resolve(dir)),
            timeoutMs: options.timeoutMs ?? defaultTimeoutMs,
        });
        const smokeTokens = heldOut.conversations[0]?.promptTokens ?? [0];
        const smoke = await client.draft(smokeTokens, draftLength);
        if (smoke.ok && smoke.draft.length === draftLength)
            decide("smoke", true, `POST /draft → ${draftLength} token ids in ${smoke.latencyMs.toFixed(0)} ms`);
        else
            decide(
                "smoke",
                false,
                smoke.ok
                    ? `POST /draft n=${draftLength} → ${smoke.draft.length} token ids, expected ${draftLength}`
                    : `POST /draft: ${smoke.failure}: ${smoke.message}`,
            );

        const { serving, summary } = await walkForServingTime(heldOut, client, draftLength, options, hooks);
        tau = summary.tau;
        decide("serving time", serving.ok, serving.figure);

        const maxFailures = options.maxFailures ?? defaultMaxFailures;
        const f = summary.failures;
        decide(
            "failures",
            f.total <= maxFailures,
            `${f.total} of ${summary.requests} requests failed, each scored as an empty draft (timeout ${f.timeout}, http ${f.http}, network ${f.network}, malformed ${f.malformed}); allowed ${maxFailures}`,
        );

        const after = await healthStatus(baseUrl, 10_000);
        decide(
            "healthy after walk",
            after === 200,
            after === 200
                ? "GET /health 200"
                : `GET /health → ${typeof after === "number" ? `HTTP ${after}` : after}${tailForMessage(server)}`,
        );
        return finish(gates, tau);
    } finally {
        await server?.stop();
        await clean?.remove();
    }
}

/** A gate's verdict and the figure that backs it. */
interface GateVerdict {
    ok: boolean;
    figure: string;
}

/**
 * The prerequisites gate: architecture.json (well-formed, naming a model file that is there), an executable serve.sh
 * and a well-formed data manifest at the folder's top.
 */
async function checkPrerequisites(
    dir: string,
): Promise<GateVerdict & { architecture?: ArchitectureFile; serveScriptRunnable: boolean }> {
    const problems: string[] = [];
    const found: string[] = [];
    let architecture: ArchitectureFile | undefined;
    try {
        const checked = checkArchitectureFile(JSON.parse(await readFile(path.join(dir, architectureFileName), "utf8")));
        if (typeof checked === "string") problems.push(`${architectureFileName}: ${checked}`);
        else {
            architecture = checked;
            const model = await stat(path.join(dir, checked.model_file)).catch(() => undefined);
            if (!model?.isFile())
                problems.push(
                    `${architectureFileName} names model_file ${checked.model_file}, which is not in the folder`,
                );
            else
                found.push(
                    `${architectureFileName} (${checked.architecture}, ${checked.quantization}, k ${checked.draft_length}, lookahead ${checked.lookahead ?? "serve's default"}, base ${checked.base_model ? `${checked.base_model.name}@${checked.base_model.revision ?? "?"}` : "not recorded"})`,
                );
        }
    } catch (error) {
        problems.push(`${architectureFileName}: ${describeReadError(error)}`);
    }
    const serveScript = path.join(dir, serveScriptName);
    let serveScriptRunnable = false;
    try {
        await access(serveScript, constants.X_OK);
        serveScriptRunnable = (await stat(serveScript)).isFile();
        found.push(serveScriptName);
    } catch (error) {
        problems.push(
            (error as NodeJS.ErrnoException).code === "ENOENT"
                ? `${serveScriptName}: missing`
                : `${serveScriptName}: not executable (chmod +x ${serveScriptName})`,
        );
    }
    try {
        const manifest = checkDataManifest(JSON.parse(await readFile(path.join(dir, dataManifestFileName), "utf8")));
        if (typeof manifest === "string") problems.push(`${dataManifestFileName}: ${manifest}`);
        else
            found.push(
                `${dataManifestFileName} (${manifest.sources.length} sources${manifest.complete ? "" : ", marked incomplete"})`,
            );
    } catch (error) {
        problems.push(`${dataManifestFileName}: ${describeReadError(error)}`);
    }
    const ok = problems.length === 0;
    return { ok, figure: ok ? found.join(", ") : problems.join("; "), architecture, serveScriptRunnable };
}

/** The size gate: every byte in the folder against the cap, and what of the cap the model and a bundled runtime take. */
async function checkSize(
    dir: string,
    architecture: ArchitectureFile | undefined,
    maxBytes: number,
): Promise<GateVerdict> {
    try {
        const { total, parts } = await folderBytes(dir);
        const share = (bytes: number): string =>
            `${formatByteCount(bytes)} = ${((100 * bytes) / maxBytes).toFixed(1)} %`;
        const model = architecture ? parts.find((p) => p.path === architecture.model_file) : undefined;
        const runtime = architecture?.runtime;
        const split = [
            ...(model ? [`model ${share(model.bytes)}`] : []),
            ...(runtime
                ? [`runtime ${share(runtime.bytes)} (node ${runtime.node}, ${runtime.backends.join(" + ")})`]
                : []),
        ];
        return {
            ok: total <= maxBytes,
            figure:
                `${formatByteCount(total)} ${total <= maxBytes ? "≤" : ">"} ${formatByteCount(maxBytes)}` +
                (split.length > 0 ? `: ${split.join(", ")} of the cap` : "") +
                (runtime ? "" : "; no runtime bundled: serve.sh needs node and specdraft on the host") +
                (total <= maxBytes ? "" : `; largest parts: ${describeLargestParts(parts)}`),
        };
    } catch (error) {
        return { ok: false, figure: describeReadError(error) };
    }
}

/**
 * The serving-time gate: the whole held-out set walked, or (by default) a sample of windows walked and the time
 * projected to the whole set, against the budget; the walk's summary feeds the failures gate.
 */
async function walkForServingTime(
    heldOut: HeldOutSet,
    client: DraftClient,
    draftLength: number,
    options: SelfcheckOptions,
    hooks: SelfcheckHooks,
): Promise<{ serving: GateVerdict; summary: WalkSummary }> {
    const totalTokens = heldOut.conversations.reduce((sum, c) => sum + c.continuationTokens.length, 0);
    const sampled = !options.full;
    const walked = sampled
        ? sampleWindows(heldOut.conversations, {
              conversations: options.sampleConversations ?? defaultSampleConversations,
              windowTokens: options.windowTokens ?? defaultWindowTokens,
              windowsPerConversation: options.windowsPerConversation ?? defaultWindowsPerConversation,
          })
        : heldOut.conversations;
    const walkedTokens = walked.reduce((sum, c) => sum + c.continuationTokens.length, 0);
    hooks.onWalkStart?.(walkedTokens, sampled);
    let result: WalkResult;
    try {
        result = await walkHeldOut(walked, client, {
            draftLength,
            concurrency: options.concurrency ?? defaultConcurrency,
            onProgress: hooks.onWalkProgress,
        });
    } finally {
        hooks.onWalkEnd?.();
    }
    const summary = summarizeWalk(result);
    const tau = summary.tau;
    const budget = options.budgetSeconds ?? defaultBudgetSeconds;
    const projected = walkedTokens > 0 ? result.servingSeconds * (totalTokens / walkedTokens) : 0;
    const servingFigure = sampled
        ? `projected ${projected.toFixed(1)} s for ${totalTokens} tokens (${result.conversations.length} windows, ${walkedTokens} tokens walked in ${result.servingSeconds.toFixed(1)} s)`
        : `${projected.toFixed(1)} s for ${totalTokens} tokens`;
    const serving = {
        ok: projected <= budget,
        figure: `${servingFigure} ${projected <= budget ? "≤" : ">"} budget ${budget} s; τ ${tau === null ? "n/a" : tau.toFixed(3)} on what was walked`,
    };
    return { serving, summary };
}

function finish(gates: GateResult[], tau: number | null): SelfcheckResult {
    return { ok: gates.every((g) => g.ok), gates, tau };
}

function describeReadError(error: unknown): string {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return "missing";
    if (error instanceof SyntaxError) return `not JSON (${error.message})`;
    return (error as Error).message;
}

function tailForMessage(server: ServeProcess): string {
    const tail = server.outputTail().split("\n").slice(-6).join("\n    ");
    return tail.trim() ? `\n    last output:\n    ${tail}` : "";
}
