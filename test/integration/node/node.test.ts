// The real node (test/env/node.ts), in one file because one node runs per machine at a time:
// 1. nothing of a node is left on the machine when its owner is SIGKILLed (the reaper runs its cleanup script);
// 2. foreground wins, down to the container: a backfill Job's pod runs a
// real container; a foreground request for the model makes the functions delete the Job, the garbage collector
// deletes the pod, the kubelet stops the container with SIGTERM, and the container exits. Measured per preemption:
//   preemption_sigterm_ms  foreground request published → the container's SIGTERM handler ran: the earlier of the
//                          time containerd read the handler's line and the exit (both come after the signal; the
//                          line's copier can lag the exit by tens of ms on a loaded machine)
//   preemption_exit_ms     foreground request published → the container's process exited (containerd's exited_at)
// MBF_NODE_PREEMPTIONS=N repeats it N times (npm run test:node:preemption: 10) and prints p50/p99; npm test runs 2;
// 3. the project's image (deploy/images/build.sh --app, from the Dockerfile unchanged) runs as a function pod and is Ready;
// 4. refusals: the kubelet's node identity, anonymous access to the kubelet, a pod's packets off the machine.
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { percentile } from '../../../dev/bench/percentile.js'
import { jobName } from '../../../pkg/core/names.js'
import { isAlive, run, runOk, waitFor } from '../../env/exec.js'
import { freePorts, httpGet } from '../../env/net.js'
import { importImages, machineFootprint, nodeUnavailableReason } from '../../env/node.js'
import { startOwnerProcess } from '../../env/owner.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { containerLog, type NodeEnv, startNodeEnv, TaskEvents } from './node-support.js'

const unavailable = nodeUnavailableReason()
const PREEMPTIONS = Number(process.env.MBF_NODE_PREEMPTIONS ?? 2)
/** The template's grace period (the Kubernetes default); the container exits on SIGTERM long before it. */
const GRACE_SECONDS = 30

/** A template whose container reports SIGTERM on stdout and exits at once; `wait` returns as the signal arrives. */
const SCRIPT = "trap 'echo SIGTERM; exit 143' TERM; echo started; sleep 3600 & wait $!"

describe.skipIf(unavailable)('a node leaves nothing behind', () => {
  it('its owner SIGKILLed with a pod running: no process, mount, cgroup, link, rule, file or sysctl left', {
    timeout: 180_000,
  }, async () => {
    const before = await machineFootprint()
    const { child, info } = await startOwnerProcess(['--node'])
    try {
      const kubectl = (args: string[], input?: string) =>
        runOk(info.binaries.kubectl, ['--kubeconfig', info.kubeconfigPath, ...args], { input })
      await kubectl(['create', 'namespace', 'leftovers'])
      await waitFor(
        'the default ServiceAccount',
        async () => (await kubectl(['-n', 'leftovers', 'get', 'sa', 'default'])).code === 0,
      )
      await kubectl([
        '-n',
        'leftovers',
        'run',
        'sleeper',
        `--image=${info.node?.images.busybox.ref}`,
        '--image-pull-policy=Never',
        '--restart=Never',
        '--',
        'sleep',
        '3600',
      ])
      await kubectl(['-n', 'leftovers', 'wait', '--for=condition=Ready', 'pod/sleeper', '--timeout=60s'])
      const during = await machineFootprint()
      // The running pod is visible in every place the cleanup covers.
      expect(during.cgroups.length).toBeGreaterThan(before.cgroups.length)
      expect(during.links.length).toBeGreaterThan(before.links.length)
      expect(during.processes.length).toBeGreaterThan(before.processes.length)
      expect(during.iptables.length).toBeGreaterThan(before.iptables.length)
      expect(during.mounts.length).toBeGreaterThan(before.mounts.length)

      process.kill(info.ownerPid, 'SIGKILL')
      await waitFor('the owner process to die', () => !isAlive(info.ownerPid), { timeoutMs: 5_000 })
      await waitFor('the environment directory to be removed', () => !existsSync(info.dir), { timeoutMs: 90_000 })
      expect(info.processes.filter((p) => isAlive(p.pid))).toEqual([])
      expect(await machineFootprint()).toEqual(before)
    } finally {
      child.kill('SIGKILL')
    }
  })
})

describe.skipIf(unavailable)('preemption reaches the container (real node)', () => {
  let ne: NodeEnv
  let runner: Runner
  let world: BackfillWorld
  let events: TaskEvents

  beforeAll(async () => {
    ne = await startNodeEnv(`t-node-preemption-${randomBytes(3).toString('hex')}`)
    runner = await startRunner({
      natsUrl: ne.env.natsUrl,
      kubeconfig: ne.kc,
      watch: true,
      namespaces: [ne.namespace],
      instance: `t${randomBytes(4).toString('hex')}`,
    })
    world = new BackfillWorld(ne.kc, ne.namespace, ne.nc)
    events = new TaskEvents(ne.node)
  }, 240_000)

  afterAll(async () => {
    events?.close()
    world?.close()
    await runner?.stop()
    await ne?.stop()
  }, 120_000)

  it(`foreground request → SIGTERM in the container → exited, ${PREEMPTIONS}×`, {
    timeout: 60_000 + PREEMPTIONS * 45_000,
  }, async () => {
    const model = 'gemma'
    const template = 'eval'
    const backfill = 'eval-gemma'
    await world.model(model, { node: ne.node.name })
    await world.template(template, {
      image: ne.node.images.busybox.ref,
      script: SCRIPT,
      terminationGracePeriodSeconds: GRACE_SECONDS,
    })
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })

    const sigterm: number[] = []
    const jobGone: number[] = []
    const podDeleting: number[] = []
    const exited: number[] = []
    for (let attempt = 1; attempt <= PREEMPTIONS; attempt++) {
      const job = jobName(backfill, attempt)
      // Running, and the container has started its work (its first line is in the log).
      const pod = await waitUntil(
        `attempt ${attempt}: Job ${job}'s container started`,
        async () => {
          const pods = await world.core.listNamespacedPod({ namespace: ne.namespace, labelSelector: `job-name=${job}` })
          const p = pods.items.find((i) => i.status?.containerStatuses?.[0]?.state?.running)
          if (!p) return undefined
          return (await containerLog(ne.node, p, 'eval')).some((l) => l.text === 'started') ? p : undefined
        },
        40_000,
      )
      const containerId = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^containerd:\/\//, '')
      expect(containerId).toMatch(/^[0-9a-f]{64}$/)
      expect(pod.spec?.nodeName).toBe(ne.node.name)

      // Where the time goes: when the Job's delete and the pod's deletion are first seen (polled every 20 ms).
      const seen = observeDeletion(world, ne.namespace, job, pod.metadata?.name as string)
      const requestAt = await world.foreground(model)
      const requestNs = BigInt(requestAt) * 1_000_000n
      const termLine = await waitUntil(
        `attempt ${attempt}: SIGTERM in the container`,
        async () => (await containerLog(ne.node, pod as V1Pod, 'eval')).find((l) => l.text === 'SIGTERM'),
        20_000,
      )
      const exitNs = await events.exitOf(containerId, 20_000)
      const deletion = await seen
      jobGone.push(deletion.job - requestAt)
      podDeleting.push(deletion.pod - requestAt)
      const exitMs = Number(exitNs - requestNs) / 1e6
      sigterm.push(Math.min(Number(termLine.atNs - requestNs) / 1e6, exitMs))
      exited.push(exitMs)
      // The backfill saw it as a foreground preemption, and the next quiet window starts the next attempt.
      await world.waitForStatus(
        backfill,
        `attempt ${attempt} cancelled by foreground demand`,
        (s) => (s.attempts ?? 0) >= attempt && s.phase !== 'Running',
      )
    }

    const result = {
      preemptions: PREEMPTIONS,
      preemption_sigterm_ms: sigterm.map(round),
      preemption_exit_ms: exited.map(round),
      preemption_sigterm_ms_p50: percentile(sigterm, 50),
      preemption_sigterm_ms_p99: percentile(sigterm, 99),
      preemption_exit_ms_p50: percentile(exited, 50),
      preemption_exit_ms_p99: percentile(exited, 99),
      // The steps before the kubelet: the functions' Job DELETE, then the garbage collector's pod delete.
      job_deleted_ms: jobGone,
      pod_deletion_ms: podDeleting,
      grace_seconds: GRACE_SECONDS,
    }
    console.log(`[node] ${JSON.stringify(result)}`)
    // SIGTERM well inside the grace period; the container's exit right after its handler ran.
    for (let i = 0; i < PREEMPTIONS; i++) {
      expect(sigterm[i]).toBeGreaterThan(0)
      expect(sigterm[i]).toBeLessThan(10_000)
      expect(exited[i]).toBeGreaterThanOrEqual(sigterm[i] as number)
      expect((exited[i] as number) - (sigterm[i] as number)).toBeLessThan(2_000)
    }
    const state = await world.state(backfill)
    expect(state?.counters.preemptions).toEqual({ foreground: PREEMPTIONS })
  })
})

const round = (n: number) => Math.round(n * 10) / 10

/** When (ms since the epoch, to ±20 ms) the Job is first seen deleting or gone, and its pod first seen deleting. */
async function observeDeletion(world: BackfillWorld, namespace: string, job: string, pod: string) {
  let jobAt = 0
  let podAt = 0
  const deadline = Date.now() + 20_000
  while ((!jobAt || !podAt) && Date.now() < deadline) {
    const [j, p] = await Promise.all([
      jobAt ? undefined : world.job(job),
      podAt ? undefined : world.core.readNamespacedPod({ namespace, name: pod }).catch(() => null),
    ])
    const now = Date.now()
    if (!jobAt && (j === null || j?.metadata?.deletionTimestamp)) jobAt = now
    if (!podAt && (p === null || p?.metadata?.deletionTimestamp)) podAt = now
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { job: jobAt, pod: podAt }
}

describe.skipIf(unavailable)("the project's image on the node, and the node's boundaries", () => {
  // Its own environment keeps this independent of the preemption runs above (and of their runner's functions).
  let ne: NodeEnv

  beforeAll(async () => {
    ne = await startNodeEnv(`t-node-image-${randomBytes(3).toString('hex')}`)
  }, 240_000)

  afterAll(async () => {
    await ne?.stop()
  }, 120_000)

  it('the demand function runs as a pod from the image, non-root on a read-only root filesystem, and is Ready', {
    timeout: 120_000,
  }, async (ctx) => {
    const app = ne.node.images.app
    if (!app) ctx.skip('no project image: deploy/images/build.sh --app (npm run images) has not been run')
    const image = app as NonNullable<typeof app>
    await importImages(ne.node.containerdAddress, [image.archive])
    const port = (await freePorts(1))[0] as number
    // On the host's network: the environment's NATS listens on loopback. As the manifests run it otherwise.
    await world(ne).core.createNamespacedPod({
      namespace: ne.namespace,
      body: {
        metadata: { name: 'demand', labels: { 'app.kubernetes.io/component': 'demand' } },
        spec: {
          hostNetwork: true,
          dnsPolicy: 'ClusterFirstWithHostNet',
          automountServiceAccountToken: false,
          securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [
            {
              name: 'function',
              image: image.ref,
              imagePullPolicy: 'Never',
              env: [
                { name: 'FUNCTION', value: 'demand' },
                { name: 'TRANSPORT', value: 'jetstream' },
                { name: 'WATCH', value: 'false' },
                { name: 'HOST', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
                { name: 'PORT', value: String(port) },
                { name: 'NATS_URL', value: ne.env.natsUrl },
              ],
              readinessProbe: { httpGet: { path: '/readyz', port }, periodSeconds: 1 },
              livenessProbe: { httpGet: { path: '/healthz', port } },
              securityContext: {
                readOnlyRootFilesystem: true,
                allowPrivilegeEscalation: false,
                capabilities: { drop: ['ALL'] },
              },
            },
          ],
        },
      },
    })
    const ready = await waitUntil(
      'the demand pod Ready',
      async () => {
        const pod = await world(ne).core.readNamespacedPod({ namespace: ne.namespace, name: 'demand' })
        return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? pod : undefined
      },
      90_000,
    )
    expect(ready.spec?.nodeName).toBe(ne.node.name)
    // The image's own user (the Dockerfile's USER node), not root.
    const metrics = await fetch(`http://${ne.node.hostIp}:${port}/metrics`)
    expect(metrics.status).toBe(200)
    const exec = await runOk(ne.env.binaries.kubectl, [
      '--kubeconfig',
      ne.env.kubeconfigPath,
      '-n',
      ne.namespace,
      'exec',
      'demand',
      '--',
      'node',
      '-e',
      'console.log(process.getuid(), process.version); try { require("fs").writeFileSync("/app/x", "") } catch (e) { console.log(e.code) }',
    ])
    const [uid, version, write] = exec.stdout.trim().split(/\s+/)
    expect(uid).toBe('1000')
    expect(write).toBe('EROFS')
    console.log(`[node] demand pod Ready from ${image.ref} (FROM ${image.from}, Node ${version})`)
  })

  it('a Deployment behind a Service: its ClusterIP from cluster DNS, reached through kube-proxy from a pod', {
    timeout: 120_000,
  }, async () => {
    const kubectl = (args: string[]) =>
      runOk(ne.env.binaries.kubectl, ['--kubeconfig', ne.env.kubeconfigPath, '-n', ne.namespace, ...args], {
        timeoutMs: 90_000,
      })
    const image = ne.node.images.busybox.ref
    await kubectl([
      'create',
      'deployment',
      'web',
      `--image=${image}`,
      '--',
      'sh',
      '-c',
      'mkdir -p /www && echo hello-from-web >/www/index.html && httpd -f -p 8080 -h /www',
    ])
    await kubectl(['expose', 'deployment', 'web', '--port=80', '--target-port=8080'])
    await kubectl(['wait', '--for=condition=Available', 'deployment/web', '--timeout=60s'])
    // busybox's own resolver (nslookup) and nc with an address: its static build has no NSS for names.
    const fqdn = `web.${ne.namespace}.svc.cluster.local`
    const client = await kubectl([
      'run',
      'client',
      `--image=${image}`,
      '--image-pull-policy=Never',
      '--restart=Never',
      '--attach',
      '--rm',
      '--quiet',
      '--command',
      '--',
      'sh',
      '-c',
      // A few tries: CoreDNS learns of the new Service from its watch. One line at the end, after a pause: output
      // written before `kubectl run --attach` has attached is lost.
      `sleep 2; for i in 1 2 3 4 5 6 7 8 9 10; do ip=$(nslookup ${fqdn} 2>/dev/null | awk '/^Address: / { print $2 }' | tail -1); [ -n "$ip" ] && break; sleep 1; done; echo "$ip $(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 "$ip" 80 | tail -1)"`,
    ])
    const [ip, body] = client.stdout.trim().split(' ')
    const service = JSON.parse((await kubectl(['get', 'service', 'web', '-o', 'json'])).stdout)
    expect(ip).toBe(service.spec.clusterIP)
    expect(body).toBe('hello-from-web')
  })

  it("the kubelet's identity is a node's, not an admin's; its API refuses strangers; pods cannot leave the machine", {
    timeout: 120_000,
  }, async () => {
    const kubectl = (kubeconfig: string, args: string[]) =>
      run(ne.env.binaries.kubectl, ['--kubeconfig', kubeconfig, ...args])
    const kubeletKc = join(ne.env.dir, 'node', 'kubelet.kubeconfig')
    // Node authorizer + NodeRestriction: no Secrets beyond its pods', no pods of its own making, no other Node.
    const secrets = await kubectl(kubeletKc, ['get', 'secrets', '-A'])
    expect(secrets.code).not.toBe(0)
    expect(secrets.stderr).toMatch(/forbidden/)
    const pod = await kubectl(kubeletKc, ['-n', ne.namespace, 'run', 'x', '--image=busybox', '--restart=Never'])
    expect(pod.stderr).toMatch(/forbidden/)
    const other = await kubectl(kubeletKc, ['label', 'node', ne.node.name, 'x=y', '--dry-run=server'])
    expect(other.code).toBe(0) // its own Node it may label (within NodeRestriction's allowed labels)...
    const foreign = await kubectl(kubeletKc, ['label', 'node', ne.node.name, 'node-role.kubernetes.io/control-plane='])
    expect(foreign.stderr).toMatch(/forbidden|not allowed/) // ...but not the restricted ones.
    // kube-proxy reads Services and EndpointSlices; it writes no pod.
    const proxy = await kubectl(join(ne.env.dir, 'node', 'kube-proxy.kubeconfig'), [
      '-n',
      ne.namespace,
      'delete',
      'pods',
      '--all',
    ])
    expect(proxy.stderr).toMatch(/forbidden/)

    // The kubelet's API: no anonymous access (x509 from the environment's CA only).
    const port = JSON.parse((await kubectl(ne.env.kubeconfigPath, ['get', 'node', ne.node.name, '-o', 'json'])).stdout)
      .status.daemonEndpoints.kubeletEndpoint.Port as number
    const anonymous = await httpGet(`https://${ne.node.hostIp}:${port}/pods`, { insecure: true })
    expect(anonymous.status).toBe(401)

    // A pod's packets to an address beyond the bridge are dropped where the bridge meets the rest (no NAT either).
    // The address beyond is a network namespace made here, reached by a veth pair: were the rule missing, the
    // packets would still never leave this machine.
    const dropped = async () => {
      const rules = (await runOk('iptables', ['-S', 'FORWARD', '-v'])).stdout.split('\n')
      const out = rules.find((r) => r.includes(`-i ${ne.node.bridge} ! -o ${ne.node.bridge}`) && r.includes('DROP'))
      return Number(/ -c (\d+) /.exec(out ?? '')?.[1] ?? Number.NaN)
    }
    const tag = randomBytes(3).toString('hex')
    const [outside, hostEnd, farEnd] = [`mbf-out-${tag}`, `mbfo${tag}`, `mbfp${tag}`]
    try {
      await runOk('ip', ['netns', 'add', outside])
      await runOk('ip', ['link', 'add', hostEnd, 'type', 'veth', 'peer', 'name', farEnd])
      await runOk('ip', ['link', 'set', farEnd, 'netns', outside])
      await runOk('ip', ['addr', 'add', '203.0.113.1/24', 'dev', hostEnd])
      await runOk('ip', ['link', 'set', hostEnd, 'up'])
      await runOk('ip', ['-n', outside, 'addr', 'add', '203.0.113.7/24', 'dev', farEnd])
      await runOk('ip', ['-n', outside, 'link', 'set', farEnd, 'up'])
      await runOk('ip', ['-n', outside, 'link', 'set', 'lo', 'up'])
      const before = await dropped()
      const ping = await kubectl(ne.env.kubeconfigPath, [
        '-n',
        ne.namespace,
        'run',
        'leaver',
        `--image=${ne.node.images.busybox.ref}`,
        '--image-pull-policy=Never',
        '--restart=Never',
        '--attach',
        '--rm',
        '--quiet',
        '--command',
        '--',
        'sh',
        '-c',
        'ping -c 2 -W 1 203.0.113.7 >/dev/null 2>&1 && echo reached || echo unreachable',
      ])
      expect(ping.stdout.trim()).toBe('unreachable')
      expect(await dropped()).toBeGreaterThanOrEqual(before + 2)
    } finally {
      await run('ip', ['link', 'del', hostEnd])
      await run('ip', ['netns', 'del', outside])
    }
    expect((await runOk('iptables-save', ['-t', 'nat'])).stdout).not.toMatch(
      new RegExp(`MASQUERADE.*${ne.node.podCidr.replace(/[./]/g, '\\$&')}`),
    )
  })
})

const world = (ne: NodeEnv) => new BackfillWorld(ne.kc, ne.namespace, ne.nc)
