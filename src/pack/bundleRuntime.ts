/**
 * The runtime `specdraft pack --bundle` puts into a drafter folder, so that its serve.sh starts on a Linux host with no
 * node, no specdraft and no network: one tar, xz-compressed (drafterFolder.ts: runtimeArchiveName), holding
 *
 *     bin/node                          the node binary packing runs on, stripped of symbols and debug sections
 *     specdraft/package.json, dist/     the built specdraft
 *     specdraft/build/native/<engine>/  the native draft engine: cpu, plus cuda or vulkan when asked
 *     specdraft/node_modules/…          the production dependencies as node resolves them, with, of llama.cpp's
 *                                       binaries, only what those engines load (the libraries they link, found in
 *                                       their DT_NEEDED entries, and ggml's backend modules) — not node-llama-cpp's
 *                                       sources, its addon, other platforms' binaries or TypeScript declarations
 *
 * renderServeScript.ts's serve.sh unpacks it once, outside the folder, and runs bin/node on dist/cli/main.js. The
 * archive is built with the system's tar and xz, reproducibly (sorted names, fixed owners and times).
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, open, readdir, readFile, realpath, rm, stat, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import type { NativeVariant } from "../engine/nativeAddon.js";
import type { RuntimeDescription } from "./drafterFolder.js";
import { readElfNeeded } from "./readElfNeeded.js";
import { sha256File } from "./sha256File.js";

/** Engines a bundle can carry besides the CPU one. */
export type BundleGpu = Exclude<NativeVariant, "cpu">;
/** Every BundleGpu, for command-line choices. */
export const bundleGpus: readonly BundleGpu[] = ["cuda", "vulkan"];

/**
 * xz's filters for the archive. The model dominates a folder, so the runtime is worth xz's slowest, smallest setting,
 * with its x86 branch filter (the archive is mostly machine code) and a dictionary that spans the whole tar: 26.7 MB
 * instead of 28.3 MB at plain `-9e` (2026-12-01). Unpacking then takes ~200 MB of memory for a few seconds.
 */
const defaultXzFilters: readonly string[] = ["--x86", "--lzma2=preset=9e,dict=192MiB"];

/** What to bundle. */
export interface RuntimeBundleOptions {
    /** The specdraft checkout or package to bundle (with dist/ built and node_modules installed). */
    root: string;
    /** The node binary to carry. */
    nodeBinary: string;
    /** Engines besides the CPU one. Defaults to none. */
    gpus?: readonly BundleGpu[];
    /** xz's filter options, e.g. `["-1"]` for a fast test. Defaults to defaultXzFilters. */
    xzFilters?: readonly string[];
}

/** One file of the runtime: where it is and where it goes in the archive. */
export interface RuntimeFile {
    source: string;
    archivePath: string;
    bytes: number;
}

/** Thrown when the runtime cannot be bundled; the message says what is missing. */
export class BundleError extends Error {
    override name = "BundleError";
}

/** Writes the archive to `archive`; returns architecture.json's description of it (`file` relative to the folder). */
export async function bundleRuntime(
    options: RuntimeBundleOptions,
    archive: string,
    file: string,
): Promise<RuntimeDescription> {
    if (process.platform !== "linux")
        throw new BundleError(`--bundle packs a Linux runtime (tar, xz, ELF binaries); this is ${process.platform}`);
    const files = await runtimeFiles(options);
    const staging = await mkdtemp(path.join(path.dirname(archive), ".specdraft-bundle-"));
    let nodeStripped: boolean;
    try {
        // tar reads every file through one folder: bin/node (stripped, or a link) and specdraft/ (a link to root)
        await mkdir(path.join(staging, "bin"));
        const node = path.join(staging, "bin", "node");
        nodeStripped = await stripNode(options.nodeBinary, node);
        (files.find((f) => f.archivePath === "bin/node") as RuntimeFile).bytes = (await stat(node)).size;
        await symlink(path.resolve(options.root), path.join(staging, "specdraft"));
        const list = path.join(staging, "files.txt");
        await writeFile(list, `${files.map((f) => f.archivePath).join("\0")}\0`);
        await tarXz(staging, list, archive, options.xzFilters ?? defaultXzFilters);
    } finally {
        await rm(staging, { recursive: true, force: true });
    }
    return {
        file,
        bytes: (await stat(archive)).size,
        unpacked_bytes: files.reduce((sum, f) => sum + f.bytes, 0),
        sha256: await sha256File(archive),
        node: nodeVersion(options.nodeBinary),
        node_stripped: nodeStripped,
        platform: `${process.platform}-${process.arch}`,
        backends: ["cpu", ...(options.gpus ?? [])],
    };
}

/**
 * `node` at `dest` without its symbol table and debug sections (`strip --strip-all`: the dynamic symbols that native
 * addons link against stay): 86 MB instead of 99 MB, 2.8 MB less once compressed. A link to it unchanged where
 * binutils' strip is missing or fails; returns whether it was stripped.
 */
async function stripNode(node: string, dest: string): Promise<boolean> {
    const source = await realpath(node);
    const result = spawnSync("strip", ["--strip-all", "-o", dest, source], { encoding: "utf8" });
    if (result.status === 0 && spawnSync(dest, ["--version"]).status === 0) return true;
    await rm(dest, { force: true });
    await symlink(source, dest);
    return false;
}

/** Every file the runtime holds, in archive order; throws BundleError naming what is missing from `root`. */
export async function runtimeFiles(options: RuntimeBundleOptions): Promise<RuntimeFile[]> {
    const root = path.resolve(options.root);
    const files = new Map<string, RuntimeFile>();
    const add = async (source: string): Promise<void> => {
        const archivePath = `specdraft/${path.relative(root, source)}`;
        if (!files.has(archivePath)) files.set(archivePath, { source, archivePath, bytes: (await stat(source)).size });
    };
    const node = await realpath(options.nodeBinary).catch(() => {
        throw new BundleError(`node binary ${options.nodeBinary} does not exist`);
    });
    files.set("bin/node", { source: node, archivePath: "bin/node", bytes: (await stat(node)).size });
    const packageJson = await readJson(path.join(root, "package.json"));
    if (packageJson?.name !== "specdraft") throw new BundleError(`${root} is not a specdraft checkout or package`);
    await add(path.join(root, "package.json"));
    const dist = path.join(root, "dist");
    if (!existsSync(path.join(dist, "cli", "main.js")))
        throw new BundleError(`${root} has no built specdraft (dist/cli/main.js): run npm run build`);
    for (const source of await walk(dist, isRuntimeFile)) await add(source);

    // the native engines and the llama.cpp libraries they load
    const binsDirs: string[] = [];
    for (const variant of ["cpu", ...(options.gpus ?? [])] as NativeVariant[]) {
        const dir = path.join(root, "build", "native", variant);
        const addon = path.join(dir, "specdraft_engine.node");
        const info = await readJson(path.join(dir, "variant.json"));
        if (!existsSync(addon) || typeof info?.binsDir !== "string") {
            const command =
                variant === "cpu" ? "npm run build:native" : `node scripts/build-native.mjs --gpu ${variant}`;
            throw new BundleError(`the ${variant} native engine is not built in ${dir}: run ${command}`);
        }
        const binsDir = path.resolve(dir, info.binsDir);
        if (path.relative(root, binsDir).startsWith(".."))
            throw new BundleError(`the ${variant} engine's llama.cpp binaries ${binsDir} lie outside ${root}`);
        binsDirs.push(binsDir);
        await add(addon);
        await add(path.join(dir, "variant.json"));
        for (const library of await engineLibraries(addon, binsDir)) await add(library);
    }

    // the production dependencies; of node-llama-cpp's binary packages only the package.json of those holding bins
    const binaryPackages = path.join(root, "node_modules", "@node-llama-cpp");
    for (const dir of await productionPackages(root)) {
        if (isInside(dir, binaryPackages)) {
            if (binsDirs.some((bins) => isInside(bins, dir))) await add(path.join(dir, "package.json"));
            continue;
        }
        const skip = [...packageExtras, ...(path.basename(dir) === "node-llama-cpp" ? nodeLlamaCppBuildOnly : [])];
        for (const source of await walk(dir, (relative) => isRuntimeFile(relative) && !isUnder(relative, skip)))
            await add(source);
    }
    return [...files.values()];
}

/** Parts of node-llama-cpp used only to build or download llama.cpp, or to scaffold projects: never at run time. */
const nodeLlamaCppBuildOnly = ["llama/llama.cpp", "llama/gitRelease.bundle", "llama/localBuilds", "templates"];

/** A package's folders of tests, examples and benchmarks (bintrees ships 2 MB of test data). */
const packageExtras = ["test", "tests", "__tests__", "example", "examples", "benchmark", "benchmarks", "bench"];

/** Not needed to run: TypeScript declarations, source maps and documentation (licenses stay). */
function isRuntimeFile(relative: string): boolean {
    const name = path.basename(relative);
    if (/^(LICEN[CS]E|COPYING|NOTICE)/i.test(name)) return true;
    return !/\.d\.[cm]?ts$|\.map$|\.md$|\.markdown$/i.test(name);
}

/**
 * The libraries of `binsDir` the engine at `addon` loads: those it links (DT_NEEDED, transitively) and ggml's backend
 * modules (`libggml-cpu-*.so`, `libggml-cuda.so`, …), which ggml loads from that folder at start-up.
 */
async function engineLibraries(addon: string, binsDir: string): Promise<string[]> {
    const available = new Set(await readdir(binsDir));
    const chosen = new Set<string>();
    const queue = [addon];
    for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
        for (const name of await readElfNeeded(file))
            if (available.has(name) && !chosen.has(name)) {
                chosen.add(name);
                queue.push(path.join(binsDir, name));
            }
    }
    for (const name of available)
        if (/^libggml-[a-z0-9]+(-[a-z0-9]+)?\.so$/.test(name) && name !== "libggml-base.so") chosen.add(name);
    return [...chosen].sort().map((name) => path.join(binsDir, name));
}

/**
 * The folders of every package `root`'s `dependencies` and `optionalDependencies` need, transitively, resolved as
 * node resolves them (the nearest node_modules up the tree); optional ones that are not installed are skipped, peer
 * dependencies are not followed (node-llama-cpp's optional TypeScript).
 */
async function productionPackages(root: string): Promise<string[]> {
    const found = new Set<string>();
    const visit = async (dir: string): Promise<void> => {
        const manifest = await readJson(path.join(dir, "package.json"));
        const required = Object.keys(manifest?.dependencies ?? {});
        const optional = Object.keys(manifest?.optionalDependencies ?? {});
        for (const name of [...required, ...optional]) {
            const resolved = resolvePackage(dir, name, root);
            if (resolved === undefined) {
                if (optional.includes(name)) continue;
                throw new BundleError(
                    `${name} (needed by ${path.relative(root, dir) || "specdraft"}) is not installed: run npm ci`,
                );
            }
            if (found.has(resolved)) continue;
            found.add(resolved);
            await visit(resolved);
        }
    };
    await visit(root);
    return [...found].sort();
}

function resolvePackage(from: string, name: string, root: string): string | undefined {
    for (let dir = from; ; dir = path.dirname(dir)) {
        const candidate = path.join(dir, "node_modules", name);
        if (existsSync(path.join(candidate, "package.json"))) return candidate;
        if (dir === root || dir === path.dirname(dir)) return undefined;
    }
}

/** Files under `dir` (links followed) whose path relative to it passes `keep`; nested node_modules are left out. */
async function walk(dir: string, keep: (relative: string) => boolean): Promise<string[]> {
    const out: string[] = [];
    const visit = async (relative: string): Promise<void> => {
        for (const entry of (await readdir(path.join(dir, relative))).sort()) {
            const inner = relative ? `${relative}/${entry}` : entry;
            if (entry === "node_modules") continue;
            const info = await stat(path.join(dir, inner)).catch(() => undefined);
            if (info?.isDirectory()) await visit(inner);
            else if (info?.isFile() && keep(inner)) out.push(path.join(dir, inner));
        }
    };
    await visit("");
    return out;
}

function isUnder(relative: string, prefixes: readonly string[]): boolean {
    return prefixes.some((prefix) => relative === prefix || relative.startsWith(`${prefix}/`));
}

function isInside(inner: string, outer: string): boolean {
    const relative = path.relative(outer, inner);
    return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

/** `tar | xz` of the files `list` names (NUL-separated, relative to `dir`) into `archive`. */
async function tarXz(dir: string, list: string, archive: string, filters: readonly string[]): Promise<void> {
    const output = await open(archive, "w");
    try {
        const tar = spawn(
            "tar",
            [
                "--create",
                "--file=-",
                `--directory=${dir}`,
                "--dereference",
                "--null",
                `--files-from=${list}`,
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "--format=gnu",
            ],
            { stdio: ["ignore", "pipe", "pipe"] },
        );
        const xz = spawn("xz", ["--threads=0", ...filters, "--stdout"], { stdio: ["pipe", output.fd, "pipe"] });
        if (xz.stdin) tar.stdout.pipe(xz.stdin);
        const [tarResult, xzResult] = await Promise.all([finished(tar), finished(xz)]);
        for (const [tool, result] of [
            ["tar", tarResult],
            ["xz", xzResult],
        ] as const)
            if (result.code !== 0)
                throw new BundleError(
                    result.code === "ENOENT"
                        ? `--bundle needs ${tool} on this machine`
                        : `${tool} failed (${result.code}): ${result.stderr.trim().slice(-500)}`,
                );
    } finally {
        await output.close();
    }
}

/** How a child process ended: its exit code (or signal, or spawn error code) and what it wrote to stderr. */
function finished(child: ReturnType<typeof spawn>): Promise<{ code: number | string; stderr: string }> {
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
        stderr += chunk.toString("utf8");
    });
    return new Promise((resolve) => {
        child.once("error", (error: NodeJS.ErrnoException) => resolve({ code: error.code ?? "error", stderr }));
        child.once("close", (code, signal) => resolve({ code: code ?? signal ?? "unknown", stderr }));
    });
}

function nodeVersion(nodeBinary: string): string {
    const result = spawnSync(nodeBinary, ["--version"], { encoding: "utf8" });
    if (result.status !== 0) throw new BundleError(`${nodeBinary} --version failed: ${result.stderr || result.error}`);
    return result.stdout.trim();
}

/** The fields read from a package.json or a native build's variant.json. */
interface JsonFields {
    name?: string;
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
    binsDir?: string;
}

async function readJson(file: string): Promise<JsonFields | undefined> {
    try {
        return JSON.parse(await readFile(file, "utf8")) as JsonFields;
    } catch {
        return undefined;
    }
}
