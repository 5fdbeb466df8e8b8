// dev/scripts/install.sh: a wait that times out names each pod that is not Ready, why its containers wait, and what
// to do about a pull failure, instead of ending with kubectl's bare timeout. kubectl is a stub: no cluster.
import { spawnSync } from 'node:child_process'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { repoRoot } from '../env/binaries.js'

const tmp = mkdtempSync(join(tmpdir(), 'install-wait-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

// What `get pods -o jsonpath=…` prints for a pulling pod, a Ready pod and a pod whose init container waits.
const pods = [
  'model-backfill-demand-7c9\tFalse\tdemand=ImagePullBackOff: Back-off pulling image "ghcr.io/flexinfer/model-backfill:0.2.0"\t',
  'model-backfill-cancel-5d1\tTrue\tcancel=: \t',
  'model-backfill-admit-9f2\tFalse\tgate=CreateContainerConfigError: secret "mbf-gate" not found\tadmit=PodInitializing: \t',
].join('\n')
const kubectl = join(tmp, 'kubectl')
writeFileSync(
  kubectl,
  `#!/bin/sh
case "$*" in
*"get job"*) echo model-backfill-provision-1 ;;
*"wait --for=condition=complete"*) exit 0 ;;
*"get deploy -o name"*) printf 'deployment.apps/model-backfill-demand\\n' ;;
*"rollout status"*) echo 'error: timed out waiting for the condition' >&2; exit 1 ;;
*"get pods"*) cat <<'PODS'
${pods}
PODS
;;
*) echo "unexpected kubectl $*" >&2; exit 3 ;;
esac
`,
)
chmodSync(kubectl, 0o755)

describe('install.sh wait', () => {
  it('a rollout that times out prints the pods that are not Ready, their waiting reasons and the image hint', () => {
    const r = spawnSync('sh', [join(repoRoot, 'dev/scripts/install.sh'), 'wait'], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, KUBECTL: kubectl, MBF_MODE: 'keda', MBF_TIMEOUT: '1s', MBF_DIR: join(tmp, 'dir') },
    })
    expect(r.status, r.stderr).toBe(1)
    expect(r.stderr).toContain('deployment.apps/model-backfill-demand did not become ready within 1s')
    expect(r.stderr).toContain('pod model-backfill-demand-7c9')
    expect(r.stderr).toContain(
      'container demand: ImagePullBackOff: Back-off pulling image "ghcr.io/flexinfer/model-backfill:0.2.0"',
    )
    expect(r.stderr).toContain('container gate: CreateContainerConfigError: secret "mbf-gate" not found')
    expect(r.stderr).toContain('container admit: PodInitializing')
    expect(r.stderr).not.toContain('model-backfill-cancel-5d1')
    expect(r.stderr).toMatch(/hint: .*MBF_IMAGE.*image archive.*docs\/troubleshooting\.md#install-waits-time-out/)
  })
})
