#!/usr/bin/env node
// Builds specdraft's native addon (src/engine/native/*.cpp: the draft engine and the module; src/generate/native/*.cpp:
// generate's target) against
// node-llama-cpp's llama.cpp binaries: one g++ call over its few translation units, a few seconds.
//
//   node scripts/build-native.mjs                 # CPU variant (node-llama-cpp's prebuilt linux-x64 binaries)
//   node scripts/build-native.mjs --gpu cuda      # CUDA: node-llama-cpp's local build (llama/lastBuild.json) if any,
//                                                 #       else the prebuilt @node-llama-cpp/linux-x64-cuda binaries
//   node scripts/build-native.mjs --gpu vulkan    # prebuilt @node-llama-cpp/linux-x64-vulkan binaries
//   node scripts/build-native.mjs --gpu all       # every variant whose binaries are installed
//   node scripts/build-native.mjs --bins DIR [--variant NAME]   # any folder holding libllama*.so and libggml*.so
//   add --if-possible to warn and exit 0 instead of failing when g++ or the binaries are missing (for npm prepare)
//
// Output: build/native/<variant>/specdraft_engine.node, linked with an $ORIGIN-relative rpath to the binaries folder,
// and build/native/<variant>/variant.json ({ binsDir } relative to the .node file) which src/engine/nativeAddon.ts reads
// to load the backends. Headers come from node-llama-cpp's llama.cpp git bundle, checked out once (include/ and
// ggml/include/ only) into build/llama-headers; a job that has no bundle (the GPU machine) can bring that folder along.

import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const nlcDir = path.join(root, "node_modules", "node-llama-cpp");
const sourceDirs = [path.join(root, "src", "engine", "native"), path.join(root, "src", "generate", "native")];
// every translation unit of the addon (headers are included by them)
const sources = () =>
    sourceDirs.flatMap((dir) =>
        fs
            .readdirSync(dir)
            .filter((f) => f.endsWith(".cpp"))
            .sort()
            .map((f) => path.join(dir, f)),
    );
const headersDir = path.join(root, "build", "llama-headers");

let ifPossible = false;

function fail(message) {
    console.error(`build-native: ${message}`);
    if (ifPossible)
        console.error("build-native: skipped (--if-possible); `specdraft serve` needs it: run npm run build:native");
    process.exit(ifPossible ? 0 : 1);
}

function parseArgs(argv) {
    const args = { gpu: "cpu", bins: undefined, variant: undefined };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "--gpu") args.gpu = argv[++i];
        else if (a === "--bins") args.bins = argv[++i];
        else if (a === "--variant") args.variant = argv[++i];
        else if (a === "--if-possible") ifPossible = true;
        else if (a === "--help" || a === "-h") {
            const lines = fs
                .readFileSync(fileURLToPath(import.meta.url), "utf8")
                .split("\n")
                .slice(1);
            console.log(
                lines
                    .slice(
                        0,
                        lines.findIndex((line) => !line.startsWith("//")),
                    )
                    .join("\n"),
            );
            process.exit(0);
        } else fail(`unknown argument ${a} (see --help)`);
    }
    if (!["cpu", "cuda", "vulkan", "all"].includes(args.gpu))
        fail(`--gpu must be cpu, cuda, vulkan or all, got ${args.gpu}`);
    return args;
}

/** Binaries folder of each variant, or undefined when not installed. */
function binsDirFor(variant) {
    const platform = `${process.platform}-${process.arch}`;
    const prebuilt = (suffix) =>
        path.join(root, "node_modules", "@node-llama-cpp", platform + suffix, "bins", platform + suffix);
    if (variant === "cpu") return existing(prebuilt(""));
    if (variant === "vulkan") return existing(prebuilt("-vulkan"));
    if (variant === "cuda") {
        const lastBuild = path.join(nlcDir, "llama", "lastBuild.json");
        if (fs.existsSync(lastBuild)) {
            const { folderName } = JSON.parse(fs.readFileSync(lastBuild, "utf8"));
            const release = path.join(nlcDir, "llama", "localBuilds", folderName, "Release");
            if (folderName.includes("cuda") && fs.existsSync(release)) return release;
        }
        return existing(prebuilt("-cuda"));
    }
    return undefined;
}

function existing(dir) {
    return fs.existsSync(dir) ? dir : undefined;
}

function ensureHeaders() {
    if (fs.existsSync(path.join(headersDir, "include", "llama.h"))) return;
    const bundle = path.join(nlcDir, "llama", "gitRelease.bundle");
    if (!fs.existsSync(bundle))
        fail(`no llama.cpp headers: ${bundle} is missing and ${headersDir} was not brought along`);
    const tmp = `${headersDir}.tmp-${process.pid}`;
    fs.rmSync(tmp, { recursive: true, force: true });
    try {
        execFileSync("git", ["clone", "-q", "--no-checkout", bundle, tmp], { stdio: "inherit" });
        execFileSync("git", ["-C", tmp, "checkout", "-q", "HEAD", "--", "include", "ggml/include"], {
            stdio: "inherit",
        });
    } catch (error) {
        fs.rmSync(tmp, { recursive: true, force: true });
        fail(`could not check out llama.cpp headers from ${bundle} (is git installed?): ${error.message}`);
    }
    fs.rmSync(path.join(tmp, ".git"), { recursive: true, force: true });
    fs.rmSync(headersDir, { recursive: true, force: true });
    fs.renameSync(tmp, headersDir);
}

function nodeApiInclude() {
    const fromPackage = path.join(root, "node_modules", "node-api-headers", "include");
    if (fs.existsSync(path.join(fromPackage, "node_api.h"))) return fromPackage;
    const fromNode = path.join(path.dirname(path.dirname(process.execPath)), "include", "node");
    if (fs.existsSync(path.join(fromNode, "node_api.h"))) return fromNode;
    fail("node_api.h not found (neither node_modules/node-api-headers nor the node installation's include/node)");
}

function build(variant, binsDir) {
    const libs = fs
        .readdirSync(binsDir)
        .filter((f) => /^lib(llama|ggml)[.-].*\.so$/.test(f) && !f.startsWith("libggml-cpu-"));
    const libllama = libs.find((f) => /^libllama\..*\.so$/.test(f) || f === "libllama.so");
    const libggml = libs.find((f) => /^libggml\..*\.so$/.test(f) || f === "libggml.so");
    if (!libllama || !libggml || !libs.includes("libggml-base.so")) {
        fail(`${binsDir} lacks libllama*.so, libggml*.so or libggml-base.so`);
    }
    const outDir = path.join(root, "build", "native", variant);
    fs.mkdirSync(outDir, { recursive: true });
    const out = path.join(outDir, "specdraft_engine.node");
    const rpath = path.relative(outDir, binsDir);
    const args = [
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-DNAPI_VERSION=8",
        "-DNAPI_CPP_EXCEPTIONS",
        "-DNODE_ADDON_API_DISABLE_DEPRECATED",
        "-I",
        path.join(root, "node_modules", "node-addon-api"),
        "-I",
        nodeApiInclude(),
        "-I",
        path.join(headersDir, "include"),
        "-I",
        path.join(headersDir, "ggml", "include"),
        ...sources(),
        "-o",
        `${out}.tmp`,
        // the exact files: their names carry the variant (libllama.v0.4.0.so, libllama.cuda.v0.4.0.so, ...)
        `-l:${libllama}`,
        `-l:${libggml}`,
        "-l:libggml-base.so",
        "-L",
        binsDir,
        `-Wl,-rpath,$ORIGIN/${rpath}`,
        "-Wl,--allow-shlib-undefined",
        "-pthread",
    ];
    const started = Date.now();
    const r = spawnSync("g++", args, { stdio: "inherit" });
    if (r.error)
        fail(
            `could not run g++ (${r.error.code ?? r.error.message}): install a C++17 compiler (e.g. apt-get install g++)`,
        );
    if (r.status !== 0) fail(`g++ failed for variant ${variant} (exit ${r.status})`);
    fs.renameSync(`${out}.tmp`, out);
    fs.writeFileSync(path.join(outDir, "variant.json"), `${JSON.stringify({ variant, binsDir: rpath }, null, 2)}\n`);
    console.log(
        `build-native: ${path.relative(root, out)} (${variant}, ${((Date.now() - started) / 1000).toFixed(1)} s, libraries in ${path.relative(root, binsDir)})`,
    );
}

const args = parseArgs(process.argv.slice(2));
const check = spawnSync("g++", ["--version"], { stdio: "ignore" });
if (check.error)
    fail("g++ not found: install a C++17 compiler (e.g. apt-get install g++) and run npm run build:native");
ensureHeaders();
if (args.bins) {
    const dir = path.resolve(args.bins);
    if (!fs.existsSync(dir)) fail(`--bins ${dir} does not exist`);
    build(args.variant ?? (args.gpu === "all" ? "cpu" : args.gpu), dir);
} else {
    const variants = args.gpu === "all" ? ["cpu", "cuda", "vulkan"] : [args.gpu];
    let built = 0;
    for (const variant of variants) {
        const dir = binsDirFor(variant);
        if (!dir) {
            if (args.gpu !== "all")
                fail(`no ${variant} binaries of node-llama-cpp installed for ${process.platform}-${process.arch}`);
            continue;
        }
        build(variant, dir);
        built++;
    }
    if (built === 0) fail("no node-llama-cpp binaries found");
}
