/**
 * Starts a drafter folder's serve.sh the way a grader would — `./serve.sh` in the folder with PORT set — in its own
 * process group, so stopping it stops everything it started (npx, node, …). Keeps the tail of its output for messages.
 */
import { spawn } from "node:child_process";

/** Lines of the server's output kept for error messages. Defaults to `40`. */
export const outputTailLines = 40;

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

export function startServeScript(script: string, cwd: string, port: number, env: NodeJS.ProcessEnv = {}): ServeProcess {
    const child = spawn(script, [], {
        cwd,
        detached: true,
        env: { ...process.env, ...env, PORT: String(port) },
        stdio: ["ignore", "pipe", "pipe"]
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
        }
    };
}
