/**
 * Runs a drafter folder's serve.sh the way a grader would: on a free loopback port (findFreePort), `./serve.sh` in the
 * folder with PORT set, in its own process group so stopping it stops everything it started (npx, node, …), keeping
 * the tail of its output for messages; then polls `GET /health` until it answers 200 (waitForHealth).
 */
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { withTrailingSlash } from "../client/withTrailingSlash.js";

/** Lines of the server's output kept for error messages. Defaults to `40`. */
const outputTailLines = 40;
/** Time between /health polls. Defaults to `250` ms. */
const healthPollMs = 250;

/** A running serve.sh. */
export interface ServeProcess {
    pid: number;
    /** Resolves with the exit code (or the signal's name) when the script's process ends. */
    exited: Promise<number | string>;
    /** Whether it has ended. */
    hasExited(): boolean;
    /** The last lines it wrote, stdout and stderr interleaved. */
    outputTail(): string;
    /** SIGTERM to the whole group, SIGKILL after `graceMs`; resolves once the script's process is gone. */
    stop(graceMs?: number): Promise<void>;
}

/**
 * Starts `script` in `cwd` with PORT=`port` and `env` over this process's environment (`inherit`), or over nothing
 * (a clean environment).
 */
export function startServeScript(
    script: string,
    cwd: string,
    port: number,
    env: NodeJS.ProcessEnv = {},
    inherit = true,
): ServeProcess {
    const child = spawn(script, [], {
        cwd,
        detached: true,
        env: { ...(inherit ? process.env : {}), ...env, PORT: String(port) },
        stdio: ["ignore", "pipe", "pipe"],
    });
    const lines: string[] = [];
    let partial = "";
    const collect = (chunk: Buffer): void => {
        const parts = (partial + chunk.toString("utf8")).split("\n");
        partial = parts.pop() ?? "";
        lines.push(...parts);
        if (lines.length > outputTailLines) lines.splice(0, lines.length - outputTailLines);
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    let ended = false;
    const exited = new Promise<number | string>((resolve) => {
        child.once("error", (error) => {
            ended = true;
            lines.push(`cannot start ${script}: ${error.message}`);
            resolve("spawn-error");
        });
        child.once("exit", (code, signal) => {
            ended = true;
            resolve(code ?? signal ?? "unknown");
        });
    });
    const signalGroup = (signal: NodeJS.Signals): void => {
        if (child.pid === undefined) return;
        try {
            process.kill(-child.pid, signal);
        } catch {
            // the group is already gone
        }
    };
    return {
        pid: child.pid ?? -1,
        exited,
        hasExited: () => ended,
        outputTail: () => [...lines, ...(partial ? [partial] : [])].join("\n"),
        async stop(graceMs = 10_000) {
            signalGroup("SIGTERM");
            const timer = new Promise<"late">((resolve) => setTimeout(() => resolve("late"), graceMs).unref());
            if ((await Promise.race([exited, timer])) === "late") {
                signalGroup("SIGKILL");
                await exited;
            }
            // children that outlived the script (e.g. a server that ignored SIGTERM under npx) go too
            signalGroup("SIGKILL");
            child.stdout.destroy();
            child.stderr.destroy();
        },
    };
}

/** A loopback TCP port that was free a moment ago (the OS picks it), for starting a server under test. */
export function findFreePort(): Promise<number> {
    return new Promise((resolve, reject) => {
        const server = createServer();
        server.once("error", reject);
        server.listen(0, "127.0.0.1", () => {
            const address = server.address();
            const port = typeof address === "object" && address !== null ? address.port : 0;
            server.close(() => resolve(port));
        });
    });
}

/** How waiting for /health ended, after how many seconds. */
export type HealthWait = { healthy: true; seconds: number } | { healthy: false; seconds: number; reason: string };

/** Polls `GET {url}/health` until it answers 200, the process ends, or time runs out. */
export async function waitForHealth(
    baseUrl: string,
    timeoutSeconds: number,
    server?: ServeProcess,
): Promise<HealthWait> {
    const started = performance.now();
    const seconds = (): number => (performance.now() - started) / 1000;
    let last = "no answer yet";
    while (seconds() < timeoutSeconds) {
        if (server?.hasExited())
            return {
                healthy: false,
                seconds: seconds(),
                reason: `serve.sh exited (${await server.exited}) before /health answered 200`,
            };
        const status = await healthStatus(
            baseUrl,
            Math.ceil(Math.min(5_000, Math.max(100, (timeoutSeconds - seconds()) * 1000))),
        );
        if (status === 200) return { healthy: true, seconds: seconds() };
        last = typeof status === "number" ? `HTTP ${status}` : status;
        await new Promise((resolve) => setTimeout(resolve, healthPollMs));
    }
    return {
        healthy: false,
        seconds: seconds(),
        reason: `/health did not answer 200 within ${timeoutSeconds} s (last: ${last})`,
    };
}

/** The status of one GET /health, or why there was none. */
export async function healthStatus(baseUrl: string, timeoutMs: number): Promise<number | string> {
    try {
        const response = await fetch(new URL("health", withTrailingSlash(baseUrl)), {
            signal: AbortSignal.timeout(timeoutMs),
        });
        await response.arrayBuffer();
        return response.status;
    } catch (error) {
        const cause = (error as { cause?: { code?: string } }).cause;
        return cause?.code ?? (error as Error).name;
    }
}
