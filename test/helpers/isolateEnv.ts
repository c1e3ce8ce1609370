/**
 * Loaded before every test file by the test runner (`npm test`, `npm run test:ts`: `node --import`): clears the
 * developer's SPECDRAFT_* variables (such as serve.sh's SPECDRAFT and SPECDRAFT_RUNTIME_DIR) from this process and so from every server and command the tests start, so a shell's settings cannot
 * change what the tests check. Kept: the switches the test commands themselves set on purpose.
 */

/**
 * SPECDRAFT_TEST_GPU: engine tests on another backend; SPECDRAFT_TEST_UNGUARDED_LOGITS: logitsGuard.test.ts without
 * the guard it checks; SPECDRAFT_GGML_CPU_VARIANT: scripts/with-cpu-variant.sh.
 */
export const keptVariables: readonly string[] = [
    "SPECDRAFT_TEST_GPU",
    "SPECDRAFT_TEST_UNGUARDED_LOGITS",
    "SPECDRAFT_GGML_CPU_VARIANT",
];

for (const name of Object.keys(process.env)) {
    if ((name === "SPECDRAFT" || name.startsWith("SPECDRAFT_")) && !keptVariables.includes(name))
        delete process.env[name];
}
