/** The docs cannot advise what does not exist: every `specdraft` command and option, `npm run` script, script path,
 * backticked repository path and relative link in README.md, docs/ and the folders' READMEs is checked against the
 * CLI's own commander tree, package.json and the repository (test/docs/docsCommands.ts; the training CLI's stages and
 * flags: train/tests/test_docs_commands.py). */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { buildProgram } from "../../src/cli/program.js";
import { checkPage, cliSpec, type Known } from "./docsCommands.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** The pages users read for how to run things. */
export const DOC_PAGES = [
    "README.md",
    ...readdirSync(join(root, "docs"))
        .filter((name) => name.endsWith(".md"))
        .sort()
        .map((name) => `docs/${name}`),
    "data/README.md",
    "models/README.md",
    "bench/README.md",
    "bench/gpu/README.md",
];

function known(): Known {
    const scripts = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: object }).scripts;
    return { cli: cliSpec(buildProgram()), npmScripts: new Set(Object.keys(scripts)), root };
}

test("every command, option, script, path and link the docs advise exists", () => {
    const facts = known();
    const problems = DOC_PAGES.flatMap((page) => checkPage(page, readFileSync(join(root, page), "utf8"), facts));
    assert.deepEqual(problems, [], `\n${problems.join("\n")}`);
});

test("the check fails on a made-up flag, command, script, path, link and an unmarked output, naming each", () => {
    const page = [
        "Run it:",
        "",
        "```sh",
        "npx specdraft serve --model models/specdraft-default.gguf --no-such-flag",
        "npx specdraft validate --server http://127.0.0.1:8000 \\",
        "    --data data/lab-heldout.jsonl --made-up-too",
        "npx specdraft frobnicate --port 1",
        "npm run no-such-script && bash bench/gpu/no-such-job.sh",
        "```",
        "",
        "Inline: `serve --also-made-up`, the file `src/cli/noSuchFile.ts`, [a link](no-such-page.md) and",
        "[an anchor](training.md#no-such-heading); but `serve --port 8000`, `npm run build` and",
        "`bench/results/<run>/README.md` are fine.",
        "",
        "```",
        "$ npx specdraft validate --server http://127.0.0.1:8000 --data data/lab-heldout.jsonl",
        "τ 9.7",
        "```",
    ].join("\n");
    const problems = checkPage("docs/synthetic.md", page, known());
    const expected = [
        "docs/synthetic.md:4: specdraft serve --no-such-flag: no such option",
        "docs/synthetic.md:5: specdraft validate --made-up-too: no such option",
        "docs/synthetic.md:7: specdraft frobnicate: no such command",
        'docs/synthetic.md:8: npm run no-such-script: package.json has no script "no-such-script"',
        "docs/synthetic.md:8: bash bench/gpu/no-such-job.sh: no such file in the repository",
        "docs/synthetic.md:11: specdraft serve --also-made-up: no such option",
        "docs/synthetic.md:11: src/cli/noSuchFile.ts: no such path in the repository",
        "docs/synthetic.md:11: link no-such-page.md: no such file",
        "docs/synthetic.md:12: link training.md#no-such-heading: docs/training.md has no heading #no-such-heading",
        "docs/synthetic.md:15: shown output not marked as an example with its date and machine",
    ];
    for (const message of expected)
        assert.ok(
            problems.some((problem) => problem.startsWith(message)),
            `missing: ${message}\n${problems.join("\n")}`,
        );
    assert.equal(problems.length, expected.length, problems.join("\n"));
});
