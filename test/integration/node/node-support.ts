// What the tests on the real node share: an environment with a node (its own, next to the suite's shared one), a
// namespace, a NATS connection, and the probes that look inside the node — a container's log lines with the times
// containerd read them, and containerd's task-exit events.
import { type ChildProcess, spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { type Environment, type StartOptions, startEnvironment } from '../../env/environment.js'
import { waitFor } from '../../env/exec.js'
import { CTR, K8S_NAMESPACE, type NodeInfo } from '../../env/node.js'

export interface NodeEnv {
  env: Environment
  node: NodeInfo
  kc: KubeConfig
  namespace: string
  nc: NatsConnection
  stop(): Promise<void>
}

/** `extra`: what else the environment runs beside the node (the engine, PostgreSQL, the project's image in it). */
export async function startNodeEnv(
  namespace: string,
  extra: Pick<StartOptions, 'engine' | 'postgres'> & { appImage?: boolean } = {},
): Promise<NodeEnv> {
  const { appImage, ...rest } = extra
  const env = await startEnvironment({ node: appImage ? { appImage } : true, ...rest })
  try {
    const node = env.node as NodeInfo
    const kc = new KubeConfig()
    kc.loadFromFile(env.kubeconfigPath)
    const core = kc.makeApiClient(CoreV1Api)
    await core.createNamespace({ body: { metadata: { name: namespace } } })
    await waitFor(`ServiceAccount default in ${namespace}`, async () => {
      await core.readNamespacedServiceAccount({ name: 'default', namespace })
      return true
    })
    const nc = await connect({ servers: env.natsUrl.split(','), name: 'node test' })
    return {
      env,
      node,
      kc,
      namespace,
      nc,
      async stop() {
        await nc.close()
        await env.stop()
      },
    }
  } catch (err) {
    await env.stop()
    throw err
  }
}

/** One line of a container's log (CRI format): when containerd read it from the container, and the text. */
export interface LogLine {
  at: number
  atNs: bigint
  text: string
}

/** The container's log lines so far, from the kubelet's pod log directory (no apiserver round trip). */
export async function containerLog(node: NodeInfo, pod: V1Pod, container: string): Promise<LogLine[]> {
  const m = pod.metadata
  const dir = join(node.podLogsDir, `${m?.namespace}_${m?.name}_${m?.uid}`, container)
  let text: string
  try {
    text = await readFile(join(dir, '0.log'), 'utf8')
  } catch {
    return []
  }
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      // 2026-12-03T07:06:12.123456789Z stdout F message
      const [time = '', , , ...rest] = line.split(' ')
      return { at: Date.parse(time), atNs: rfc3339Nanos(time), text: rest.join(' ') }
    })
}

/** Nanoseconds since the epoch of an RFC 3339 time with up to nine fractional digits. */
export function rfc3339Nanos(time: string): bigint {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(time)
  if (!m) return BigInt(Date.parse(time)) * 1_000_000n
  const seconds = BigInt(Date.parse(`${m[1]}${m[3]}`)) / 1000n
  return seconds * 1_000_000_000n + BigInt((m[2] ?? '').padEnd(9, '0'))
}

/** containerd's task events (`ctr events`), for the moment a container's process exited. */
export class TaskEvents {
  private readonly child: ChildProcess
  private readonly exits = new Map<string, bigint>()

  constructor(node: NodeInfo) {
    this.child = spawn(CTR, ['--address', node.containerdAddress, '--namespace', K8S_NAMESPACE, 'events'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    })
    const lines = createInterface({ input: this.child.stdout as NodeJS.ReadableStream })
    lines.on('line', (line) => {
      // 2026-12-03 07:06:12.123456789 +0000 UTC k8s.io /tasks/exit {"container_id":"…","exited_at":"…",…}
      const at = line.indexOf('/tasks/exit ')
      if (at < 0) return
      try {
        const e = JSON.parse(line.slice(at + '/tasks/exit '.length)) as { container_id?: string; exited_at?: string }
        if (e.container_id && e.exited_at) this.exits.set(e.container_id, rfc3339Nanos(e.exited_at))
      } catch {
        return
      }
    })
  }

  /** When the container's process exited (containerd's exited_at, ns since the epoch). */
  exitOf(containerId: string, timeoutMs = 60_000): Promise<bigint> {
    return waitFor(`containerd's /tasks/exit event of ${containerId}`, () => this.exits.get(containerId), {
      timeoutMs,
      intervalMs: 20,
    })
  }

  close(): void {
    this.child.kill('SIGKILL')
  }
}
