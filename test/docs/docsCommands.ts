/**
 * What the docs advise, checked against what exists: the invocations in a Markdown page's code blocks and inline code
 * spans (`npx specdraft <command> --flag`, `npm run <script>`, `bash <path>`, `node <path>`, `python <path>`, …), the
 * repository paths it names in backticks, and its relative links with their anchors. The CLI's commands and options
 * come from its own commander tree (src/cli/program.ts); the training CLI's stages and flags are checked by
 * train/tests/test_docs_commands.py with its own parser, so `-m specdraft_train` invocations are left to it here.
 */

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import type { Command } from "commander";

/** One thing a page advises: where it is and what it says. */
export interface Advice {
    file: string;
    line: number;
    text: string;
}

/** A subcommand's long options and short flags, by name; `""` holds the program's own (global) options. */
export type CliSpec = Map<string, Set<string>>;

/** What the checks compare with: the CLI's spec, package.json's scripts, the repository root. */
export interface Known {
    cli: CliSpec;
    npmScripts: Set<string>;
    root: string;
}

/** Top-level folders whose paths the docs name; a backticked path under one of them must exist. */
export const REPO_ROOTS = ["src", "bench", "train", "docs", "data", "test", "scripts", "deploy", "models"];

/** Paths the docs name in another project, which happen to start like this repository's, and where. */
export const EXTERNAL_PATHS = new Map([
    ["src/evaluator/LlamaContext/LlamaContext.ts", "node-llama-cpp's source, docs/generate.md"],
    ["docs/multi-gpu.md", "llama.cpp's source, docs/deploy.md"],
]);

/** npm's own commands the docs may advise without a script of that name. */
const NPM_BUILTINS = new Set(["ci", "install", "i", "start", "test", "run", "exec", "pack", "publish", "version"]);

export function cliSpec(program: Command): CliSpec {
    const options = (command: Command) => {
        const names = new Set(["--help", "-h"]);
        for (const option of command.options) {
            if (option.long) names.add(option.long);
            if (option.short) names.add(option.short);
        }
        return names;
    };
    const spec: CliSpec = new Map([["", new Set([...options(program), "--version", "-V"])]]);
    for (const command of program.commands) spec.set(command.name(), options(command));
    return spec;
}

interface Block {
    line: number;
    lines: string[];
}

/** Splits a page into its fenced code blocks (with the line each starts at) and its prose with the fences blanked. */
export function splitMarkdown(markdown: string): { blocks: Block[]; prose: string } {
    const lines = markdown.split("\n");
    const blocks: Block[] = [];
    const prose: string[] = [];
    let open: Block | null = null;
    for (const [index, line] of lines.entries()) {
        if (/^\s*(```|~~~)/.test(line)) {
            if (open) {
                blocks.push(open);
                open = null;
            } else open = { line: index + 2, lines: [] };
            prose.push("");
        } else if (open) {
            open.lines.push(line);
            prose.push("");
        } else prose.push(line);
    }
    return { blocks, prose: prose.join("\n") };
}

/** Shell-ish words: quotes kept together (and removed), a `#` that starts a word ends the line. */
export function shellWords(text: string): string[] {
    const words: string[] = [];
    let word = "";
    let quote = "";
    let started = false;
    for (const char of text) {
        if (quote) {
            if (char === quote) quote = "";
            else word += char;
        } else if (char === "'" || char === '"') {
            quote = char;
            started = true;
        } else if (/\s/.test(char)) {
            if (started) words.push(word);
            word = "";
            started = false;
        } else if (char === "#" && !started) {
            break;
        } else {
            word += char;
            started = true;
        }
    }
    if (started) words.push(word);
    return words;
}

/** A command line's simple commands: words split at `&&`, `||`, `;`, `|` and `&`. */
export function simpleCommands(words: string[]): string[][] {
    const commands: string[][] = [[]];
    for (const word of words) {
        const last = commands[commands.length - 1] as string[];
        if (["&&", "||", ";", "|", "&"].includes(word)) commands.push([]);
        else if (/[;&]$/.test(word) && word.length > 1 && !word.includes("=")) {
            last.push(word.slice(0, -1));
            commands.push([]);
        } else last.push(word);
    }
    return commands.filter((command) => command.length > 0);
}

/** Every invocation a page advises: each logical line of its code blocks (continuations joined), with the folder a
 * `cd` earlier in the block moved to, and each inline code span of its prose. */
export function invocations(file: string, markdown: string): (Advice & { cwd: string })[] {
    const { blocks, prose } = splitMarkdown(markdown);
    const found: (Advice & { cwd: string })[] = [];
    for (const block of blocks) {
        let cwd = "";
        let pending = "";
        let start = block.line;
        for (const [offset, shown] of block.lines.entries()) {
            const raw = shown.replace(/^\$ /, ""); // a shown session's command
            if (!pending) start = block.line + offset;
            if (/\\\s*$/.test(raw)) {
                pending += `${raw.replace(/\\\s*$/, "")} `;
                continue;
            }
            const text = pending + raw;
            pending = "";
            // a line whose first word ends with ":" is output a block shows (`tried: …`), not a command
            if (/^\s*[^\s]+:(\s|$)/.test(text)) continue;
            found.push({ file, line: start, text, cwd });
            for (const command of simpleCommands(shellWords(text))) {
                if (command[0] === "cd" && command[1]) cwd = join(cwd, command[1]);
            }
        }
    }
    for (const match of prose.matchAll(/`([^`]+)`/g)) {
        const line = prose.slice(0, match.index).split("\n").length;
        found.push({ file, line, text: (match[1] as string).replace(/\s*\n\s*/g, " "), cwd: "" });
    }
    return found;
}

function isPlaceholder(path: string): boolean {
    return (
        /[<>*…{}$[\]|]|\.\.\.|NNNN/.test(path) ||
        path.split("/").some((part) => /^[A-Z]{1,2}(\.\w+)?$/.test(part) || /^[A-Z][A-Z_]+$/.test(part))
    );
}

/** Where a path the docs name would be: from the folder a `cd` moved to, from the repository root, or from train/
 * (the training docs' own folder, whose commands run there). A path the repository ignores (`train/.venv`,
 * `train/.cache/…`, `dist/`) is one a command makes — setup, a fetch script, the build — and a clean clone has not made
 * yet, so it counts as named rightly. */
function pathExists(root: string, cwd: string, path: string): boolean {
    const clean = path.replace(/:\d[\d,-]*$/, "").replace(/[#?].*$/, "");
    const bases = [join(root, cwd), root, join(root, "train")];
    return bases.some((base) => existsSync(join(base, clean))) || isIgnored(root, join(root, cwd, clean));
}

function isIgnored(root: string, path: string): boolean {
    try {
        execFileSync("git", ["check-ignore", "-q", "--no-index", path], { cwd: root, stdio: "ignore" });
        return true;
    } catch {
        return false; // exit 1: not ignored (or not in the repository)
    }
}

const rootPattern = new RegExp(`^(\\.\\./)*(${REPO_ROOTS.join("|")})/[\\w./@+-]*$`);

/** The problems of one invocation: an unknown command, flag, npm script, or a script path that does not exist. */
export function checkInvocation(advice: Advice & { cwd: string }, known: Known): string[] {
    const problems: string[] = [];
    const where = `${advice.file}:${advice.line}`;
    for (let words of simpleCommands(shellWords(advice.text))) {
        while (words.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0] as string)) words = words.slice(1);
        if (words.length === 0) continue;
        const [first, second] = words as [string, string | undefined];
        let cliArgs: string[] | null = null;
        if (first === "npx" && second === "specdraft") cliArgs = words.slice(2);
        else if (first === "specdraft") cliArgs = words.slice(1);
        else if (first === "node" && second && /(^|\/)(dist\/cli\/main\.js|src\/cli\/main\.ts)$/.test(second))
            cliArgs = words.slice(2);
        else if (known.cli.has(first) && first !== "" && second?.startsWith("--")) cliArgs = words; // `serve --flag`
        if (cliArgs) {
            problems.push(...checkCli(cliArgs, known.cli, where, advice.text));
            continue;
        }
        if (first === "npm" && second) {
            if (second === "run" || second === "run-script") {
                const script = words[2];
                if (script && !script.startsWith("-") && !known.npmScripts.has(script))
                    problems.push(
                        `${where}: npm run ${script}: package.json has no script "${script}" (${advice.text})`,
                    );
            } else if (!NPM_BUILTINS.has(second) && !second.startsWith("-") && !known.npmScripts.has(second))
                problems.push(`${where}: npm ${second}: neither an npm command the docs use nor a script`);
            continue;
        }
        if (["bash", "sh", "source", "."].includes(first) || /(^|\/)(node|python3?|tsx)$/.test(first)) {
            const script = words.slice(1).find((word) => /^[^-].*\.(sh|py|mjs|js|ts|cjs)$/.test(word)) ?? "";
            // a staged or absolute path (`.gpu/unpack.sh`, `/tmp/x.py`) is not the repository's
            const outside = /^\//.test(script) || (/^\./.test(script) && !/^\.\.?\//.test(script));
            if (script && !isPlaceholder(script) && !outside) {
                if (!pathExists(known.root, advice.cwd, script))
                    problems.push(`${where}: ${first} ${script}: no such file in the repository`);
            }
        }
    }
    return problems;
}

function checkCli(args: string[], spec: CliSpec, where: string, text: string): string[] {
    const global = spec.get("") as Set<string>;
    let index = 0;
    while (index < (args.length as number) && (args[index] as string).startsWith("-")) {
        const flag = (args[index] as string).split("=")[0] as string;
        if (!global.has(flag)) return [`${where}: specdraft ${flag}: no such option of specdraft (${text})`];
        index += 1;
    }
    const command = args[index];
    // `specdraft serve: …` is a message the CLI prints, not an invocation
    if (command === undefined || /^[A-Z<]/.test(command) || command === "..." || command.endsWith(":")) return [];
    const options = spec.get(command);
    if (!options) return [`${where}: specdraft ${command}: no such command (${text})`];
    const problems: string[] = [];
    for (const word of args.slice(index + 1)) {
        if (!/^--?[A-Za-z]/.test(word)) continue;
        const flag = word.split("=")[0] as string;
        if (!options.has(flag)) problems.push(`${where}: specdraft ${command} ${flag}: no such option (${text})`);
    }
    return problems;
}

/** Backticked repository paths (`src/…`, `bench/…`, …) that do not exist, placeholders aside. */
export function checkPaths(file: string, markdown: string, root: string): string[] {
    const problems: string[] = [];
    for (const advice of invocations(file, markdown)) {
        const words = advice.text.includes(" ") ? shellWords(advice.text) : [advice.text];
        for (const raw of words) {
            const word = raw.replace(/[),.;:]+$/, "").replace(/:\d[\d,-]*$/, "");
            if (!rootPattern.test(word) || isPlaceholder(word) || EXTERNAL_PATHS.has(word)) continue;
            // `train/loss` (a TensorBoard tag) is no path: two parts, no extension and no trailing slash go unchecked
            if (!/\.\w+$|\/$/.test(word) && word.split("/").length < 3) continue;
            if (!pathExists(root, advice.cwd, word.replace(/^(\.\.\/)+/, "")))
                problems.push(`${advice.file}:${advice.line}: ${word}: no such path in the repository`);
        }
    }
    return problems;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to hyphens. */
export function slug(heading: string): string {
    return heading
        .trim()
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, "")
        .replace(/\s/g, "-");
}

function anchors(markdown: string): Set<string> {
    return new Set(
        [...splitMarkdown(markdown).prose.matchAll(/^#{1,6}\s+(.+)$/gm)].map((match) => slug(match[1] as string)),
    );
}

/** Relative links that lead nowhere: a missing file, or an anchor that no heading of the target makes. */
export function checkLinks(file: string, markdown: string, root: string): string[] {
    const problems: string[] = [];
    const prose = splitMarkdown(markdown).prose;
    for (const match of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = match[1] as string;
        if (/^[a-z]+:/.test(target)) continue;
        const line = prose.slice(0, match.index).split("\n").length;
        const [path, anchor] = target.split("#") as [string, string | undefined];
        const resolved = path ? resolve(root, dirname(file), path) : resolve(root, file);
        if (!existsSync(resolved)) {
            problems.push(`${file}:${line}: link ${target}: no such file`);
            continue;
        }
        if (anchor && statSync(resolved).isFile() && resolved.endsWith(".md")) {
            if (!anchors(readFileSync(resolved, "utf8")).has(anchor))
                problems.push(`${file}:${line}: link ${target}: ${relative(root, resolved)} has no heading #${anchor}`);
        }
    }
    return problems;
}

/** A shown session (a block with `$ ` prompt lines and their output) no test or script makes must say it is an example
 * and when it was taken, in the prose just before it. */
export function checkTranscripts(file: string, markdown: string): string[] {
    const lines = markdown.split("\n");
    return splitMarkdown(markdown)
        .blocks.filter((block) => block.lines.some((line) => line.startsWith("$ ")))
        .filter((block) => {
            const before = lines.slice(Math.max(0, block.line - 6), block.line - 2).join(" ");
            return !(/\bexample\b/i.test(before) && /\b20\d\d-\d\d-\d\d\b/.test(before));
        })
        .map((block) => `${file}:${block.line - 1}: shown output not marked as an example with its date and machine`);
}

/** Every problem of one page. */
export function checkPage(file: string, markdown: string, known: Known): string[] {
    const commands = invocations(file, markdown).flatMap((advice) => checkInvocation(advice, known));
    // a missing script is named once, by the command that runs it
    const named = new Set(
        commands.map((problem) => problem.replace(/^(\S+:\d+): \S+ (\S+): no such file.*$/, "$1 $2")),
    );
    const paths = checkPaths(file, markdown, known.root).filter(
        (problem) => !named.has(problem.replace(/^(\S+:\d+): (\S+): no such path.*$/, "$1 $2")),
    );
    return [...commands, ...paths, ...checkLinks(file, markdown, known.root), ...checkTranscripts(file, markdown)];
}
