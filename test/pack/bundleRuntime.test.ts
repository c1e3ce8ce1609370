/**
 * `pack --bundle`: what the runtime holds (node, the built specdraft, production dependencies, only the llama.cpp
 * libraries the native engine loads), what it refuses, and a bundled folder passing every selfcheck gate from a clean
 * environment (no node on PATH, empty HOME, the folder copied elsewhere) without naming the packing checkout anywhere.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { runPack } from "../../src/cli/packCommand.js";
import { runSelfcheckCommand } from "../../src/cli/selfcheckCommand.js";
import { BundleError, runtimeFiles } from "../../src/pack/bundleRuntime.js";
import type { ArchitectureFile } from "../../src/pack/drafterFolder.js";
import { specdraftRoot } from "../../src/pack/packDrafter.js";
import { readElfNeeded } from "../../src/pack/readElfNeeded.js";
import { captureIo } from "../helpers/captureIo.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

const cpuEngine = path.join(specdraftRoot, "build", "native", "cpu");
let dir = "";

before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-bundle-"));
});

after(async () => {
    await rm(dir, { recursive: true, force: true });
});

test("the runtime holds node, dist, the CPU engine with only the libraries it loads, and production dependencies", async () => {
    const files = await runtimeFiles({ root: specdraftRoot, nodeBinary: process.execPath });
    const paths = new Set(files.map((f) => f.archivePath));
    const has = (p: string): boolean => paths.has(p);
    const under = (prefix: string): string[] => [...paths].filter((p) => p.startsWith(prefix));
    assert.ok(has("bin/node") && has("specdraft/package.json") && has("specdraft/dist/cli/main.js"));
    assert.ok(
        has("specdraft/build/native/cpu/specdraft_engine.node") && has("specdraft/build/native/cpu/variant.json"),
    );

    // llama.cpp: what the engine links (DT_NEEDED, transitively) and ggml's CPU backend modules; not the addon of
    // node-llama-cpp, its helper library or any other platform's binaries
    const bins = path.relative(
        specdraftRoot,
        path.resolve(cpuEngine, JSON.parse(await readFile(path.join(cpuEngine, "variant.json"), "utf8")).binsDir),
    );
    const libraries = under(`specdraft/${bins}/`).map((p) => path.basename(p));
    for (const needed of await readElfNeeded(path.join(cpuEngine, "specdraft_engine.node")))
        if (/^lib(llama|ggml)/.test(needed)) assert.ok(libraries.includes(needed), needed);
    assert.ok(
        libraries.some((name) => /^libggml-cpu-.+\.so$/.test(name)),
        "ggml's CPU variants",
    );
    assert.ok(!libraries.includes("llama-addon.node") && !libraries.some((name) => name.startsWith("libllama-common")));
    const binaryPackages = new Set(under("specdraft/node_modules/@node-llama-cpp/").map((p) => p.split("/")[3]));
    assert.deepEqual([...binaryPackages], [bins.split("/")[2]], "one binary package: the CPU engine's");

    // every production dependency, no development one, and nothing of node-llama-cpp's build-only parts
    const manifest = JSON.parse(await readFile(path.join(specdraftRoot, "package.json"), "utf8"));
    for (const dependency of Object.keys(manifest.dependencies))
        assert.ok(has(`specdraft/node_modules/${dependency}/package.json`), dependency);
    for (const dependency of Object.keys(manifest.devDependencies))
        assert.equal(under(`specdraft/node_modules/${dependency}/`).length, 0, dependency);
    assert.equal(under("specdraft/node_modules/typescript/").length, 0, "node-llama-cpp's optional peer");
    assert.equal(under("specdraft/node_modules/node-llama-cpp/llama/gitRelease.bundle").length, 0);
    assert.ok(![...paths].some((p) => p.endsWith(".d.ts") || p.endsWith(".map")));
    const size = files.reduce((sum, f) => sum + f.bytes, 0);
    assert.ok(size < 160e6, `${size} bytes unpacked`);
});

test("bundling refuses a root that is not a built specdraft, a missing engine and a missing dependency", async () => {
    const root = path.join(dir, "fake-root");
    const bundle = (gpus: ("cuda" | "vulkan")[] = []) => runtimeFiles({ root, nodeBinary: process.execPath, gpus });
    const refused = async (pattern: RegExp, gpus: ("cuda" | "vulkan")[] = []): Promise<void> => {
        await assert.rejects(bundle(gpus), (error: unknown) => {
            assert.ok(error instanceof BundleError);
            assert.match(error.message, pattern);
            return true;
        });
    };
    await mkdir(path.join(root, "dist", "cli"), { recursive: true });
    await writeFile(path.join(root, "package.json"), JSON.stringify({ name: "other" }));
    await refused(/is not a specdraft checkout or package/);
    await writeFile(path.join(root, "package.json"), JSON.stringify({ name: "specdraft", dependencies: {} }));
    await refused(/has no built specdraft \(dist\/cli\/main\.js\): run npm run build/);
    await writeFile(path.join(root, "dist", "cli", "main.js"), "");
    await refused(/the cpu native engine is not built in .*: run npm run build:native/);

    // a CPU engine whose libraries are the real ones, linked in
    const engine = path.join(root, "build", "native", "cpu");
    await mkdir(engine, { recursive: true });
    await copyFile(path.join(cpuEngine, "specdraft_engine.node"), path.join(engine, "specdraft_engine.node"));
    await writeFile(path.join(engine, "variant.json"), JSON.stringify({ variant: "cpu", binsDir: "../../../bins" }));
    const realBins = path.resolve(
        cpuEngine,
        JSON.parse(await readFile(path.join(cpuEngine, "variant.json"), "utf8")).binsDir,
    );
    await mkdir(path.join(root, "bins"));
    for (const name of await readdir(realBins)) await symlink(path.join(realBins, name), path.join(root, "bins", name));
    const files = await bundle();
    assert.ok(files.some((f) => f.archivePath.startsWith("specdraft/bins/libllama")));
    await refused(/the cuda native engine is not built in .*: run node scripts\/build-native\.mjs --gpu cuda/, [
        "cuda",
    ]);

    await writeFile(
        path.join(root, "package.json"),
        JSON.stringify({ name: "specdraft", dependencies: { fastify: "5" } }),
    );
    await refused(/fastify \(needed by specdraft\) is not installed: run npm ci/);
});

test("a bundled folder passes every selfcheck gate in a clean environment and names no path of this machine", async () => {
    const out = path.join(dir, "bundled");
    const io = captureIo();
    // xz's fastest preset: the test is about what serve.sh does with the archive, not how small it gets
    const code = await runPack(
        { model: "test/fixtures/tiny-qwen3.gguf", out, bundle: true, bundleFrom: { xzFilters: ["-0"] } },
        io,
    );
    assert.equal(code, 0, io.text().err);
    assert.match(io.text().out, /runtime [\d,]+ B = [\d.]+ % of the cap: node v\d+/);
    const architecture = JSON.parse(await readFile(path.join(out, "architecture.json"), "utf8")) as ArchitectureFile;
    assert.ok(architecture.runtime);
    assert.equal(architecture.runtime.file, "runtime/specdraft-runtime.tar.xz");
    assert.equal(architecture.runtime.bytes, (await stat(path.join(out, architecture.runtime.file))).size);
    assert.deepEqual(architecture.runtime.backends, ["cpu"]);

    // no absolute path of the packing machine, in the folder or inside the archive
    const unpacked = path.join(dir, "unpacked");
    await mkdir(unpacked);
    const tar = spawnSync("tar", ["-xJf", path.join(out, architecture.runtime.file), "-C", unpacked]);
    assert.equal(tar.status, 0, String(tar.stderr));
    for (const root of [out, unpacked])
        for (const file of await readdir(root, { recursive: true })) {
            const full = path.join(root, file);
            if (!(await stat(full)).isFile()) continue;
            const bytes = await readFile(full);
            assert.ok(!bytes.includes(specdraftRoot) && !bytes.includes(process.cwd()), `${full} names the checkout`);
        }
    await rm(unpacked, { recursive: true });

    const data = path.join(dir, "held.jsonl");
    await writeHeldOut(
        data,
        [100, 900, 2000].map((start, i) => ({
            id: `c${i}`,
            promptTokens: [start, start + 1, start + 2],
            continuationTokens: Array.from({ length: 40 }, (_, j) => (start + 3 + j * 7) % 4000),
            lineNumber: 0,
        })),
    );
    const runtimeDir = path.join(dir, "runtimes");
    const check = captureIo();
    const exitCode = await runSelfcheckCommand(
        {
            dir: out,
            data,
            cleanEnv: true,
            progress: false,
            startupTimeoutSeconds: 120,
            env: { SPECDRAFT_RUNTIME_DIR: runtimeDir },
        },
        check,
    );
    const report = check.text().out;
    assert.equal(exitCode, 0, report + check.text().err);
    assert.match(report, /all 7 gates passed/);
    assert.match(
        report,
        /✓ startup .* in a clean environment \(a copy in .*; PATH: bash, tar, (xz|python3), mkdir, mktemp, mv, rm \(no node\); HOME empty\)/,
    );
    assert.match(
        report,
        /✓ size .*model 745,472 B = 0\.1 %, runtime [\d,]+ B = [\d.]+ % \(node v\d+\.\d+\.\d+, cpu\) of the cap/,
    );
    // unpacked outside the folder, into the runtime folder, keyed by the archive's sha256
    assert.deepEqual(await readdir(runtimeDir), [architecture.runtime.sha256.slice(0, 16)]);
    assert.deepEqual((await readdir(out)).sort(), [
        "architecture.json",
        "data_manifest.json",
        "runtime",
        "serve.sh",
        "tiny-qwen3.gguf",
    ]);

    // a host without xz or python3 is told what is missing
    const bin = path.join(dir, "bare-bin");
    await mkdir(bin);
    for (const tool of ["bash", "tar", "mkdir", "mktemp", "mv", "rm"])
        for (const where of ["/usr/bin", "/bin"])
            if (spawnSync("test", ["-x", `${where}/${tool}`]).status === 0) {
                await symlink(`${where}/${tool}`, path.join(bin, tool)).catch(() => undefined);
                break;
            }
    const bare = spawnSync(path.join(out, "serve.sh"), [], {
        env: { PATH: bin, HOME: dir, SPECDRAFT_RUNTIME_DIR: path.join(dir, "other-runtimes") },
        encoding: "utf8",
    });
    assert.equal(bare.status, 127, bare.stderr);
    assert.match(bare.stderr, /serve\.sh: cannot unpack the bundled runtime: missing xz \(or python3\) on PATH/);
});
