import { fileURLToPath } from 'node:url'
import { configDefaults, defineConfig } from 'vitest/config'

// The workspace's gateway client from its sources, as tsconfig.json's paths give it to tsc and tsx: its package
// exports the built dist/ (what npm pack ships), which a checkout does not have.
const ownPackages = {
  alias: {
    '@flexinfer/gateway-emitter/connection': fileURLToPath(new URL('clients/ts/src/connection.ts', import.meta.url)),
    '@flexinfer/gateway-emitter': fileURLToPath(new URL('clients/ts/src/index.ts', import.meta.url)),
  },
}

// Three projects: pure unit tests need no servers; integration tests share one real environment
// (etcd, kube-apiserver, kube-controller-manager, nats-server) started once by the global setup; the tests on the real
// engine share it too and run last, alone.
// The evaluation workload on the real node runs with them: it decodes on the engine too, and one node runs at a time
// (node.test.ts's are done by then).
const ENGINE_TESTS = ['test/integration/engine/**/*.test.ts', 'test/integration/node/model-eval.test.ts']

/** What both integration projects share: the one environment (global-setup.ts starts it once for both). */
const integration = {
  globalSetup: ['test/env/global-setup.ts'],
  // The functions log JSON per transition; tests only want warnings and errors.
  env: { LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' },
  // ... which the loggers made in-process take from here (the entry point's configuration sets it deployed).
  setupFiles: ['test/env/log-level.ts'],
  testTimeout: 60_000,
  hookTimeout: 120_000,
}

export default defineConfig({
  test: {
    // The JSON report lets .ci/run print the plain "N passed, N failed" closing line CI looks for. The install test
    // runs after the suite and writes its own (VITEST_JSON_REPORT): a CLI --outputFile does not reach a reporter's
    // own option, and the suite's report was overwritten by the install's.
    reporters: ['default', ['json', { outputFile: process.env.VITEST_JSON_REPORT || 'test-results/vitest.json' }]],
    projects: [
      {
        resolve: ownPackages,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          // Projects with different maxWorkers must run in separate groups (vitest 4): unit first, it is quick.
          sequence: { groupOrder: 0 },
        },
      },
      {
        resolve: ownPackages,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...ENGINE_TESTS],
          ...integration,
          // Two cores: a few files at once keeps the apiserver responsive.
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        resolve: ownPackages,
        // The tests on the real engine (llama-server decoding on the CPU): alone, after the other integration files,
        // so no other file takes the cores the engine's steps (and the bounds the tests hold them to) need.
        test: {
          name: 'integration-engine',
          include: ENGINE_TESTS,
          ...integration,
          testTimeout: 120_000,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
})
