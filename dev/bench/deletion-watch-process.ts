// The benchmark's deletion watch in a process of its own. In the benchmark's process the watch's "seen" times waited
// for that event loop, which also runs source and lifecycle — busy with the very deletions measured (their watches,
// reconciles and resync sweeps): measured 2026-12-01 at load ~23, the Job's deletionTimestamp was seen p50 142 ms
// after the apiserver had answered its DELETE. Here the loop does nothing else, so a time is the watch's own delay.
// Child: `tsx dev/bench/deletion-watch-process.ts <kubeconfig> <namespace>` prints one JSON line per thing seen.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { DeletionWatch, type Seen } from './deletion-watch.js'

/** The same reads as DeletionWatch, fed from the child's lines. */
export class RemoteDeletionWatch {
  readonly jobDeletedAt = new Map<string, number>()
  private readonly podsOfJob = new Map<string, Set<string>>()
  private readonly podDeletedAt = new Map<string, number>()

  private constructor(private readonly stopChild: () => Promise<void>) {}

  /** Resolves once the child's watches have their initial lists (or rejects when it exits first, or after 120 s). */
  static async start(repoRoot: string, kubeconfigPath: string, namespace: string, stderrFd: number) {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(repoRoot, 'dev/bench/deletion-watch-process.ts'), kubeconfigPath, namespace],
      { stdio: ['ignore', 'pipe', stderrFd] },
    )
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    const w = new RemoteDeletionWatch(async () => {
      if (child.exitCode === null) child.kill('SIGTERM')
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))])
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      await exited
    })
    let ready!: () => void
    const isReady = new Promise<void>((r) => {
      ready = r
    })
    let buffer = ''
    const stdout = child.stdout as NonNullable<typeof child.stdout> // stdio 'pipe'
    stdout.setEncoding('utf8')
    stdout.on('data', (chunk: string) => {
      buffer += chunk
      const lines = buffer.split('\n')
      buffer = (lines.pop() ?? '').slice(-65_536) // bounded: a line is ~100 bytes
      for (const line of lines) {
        let seen: Seen | { k: 'ready' }
        try {
          seen = JSON.parse(line)
        } catch {
          continue
        }
        if (seen.k === 'ready') ready()
        else w.add(seen)
      }
    })
    await Promise.race([
      isReady,
      exited.then(() => Promise.reject(new Error('dev/bench/deletion-watch-process.ts exited before it was ready'))),
      new Promise((_, reject) => setTimeout(() => reject(new Error('deletion watch not ready in 120 s')), 120_000)),
    ]).catch(async (err) => {
      await w.stop()
      throw err
    })
    return w
  }

  private add(seen: Seen) {
    if (seen.k === 'job-deleted') {
      if (!this.jobDeletedAt.has(seen.name)) this.jobDeletedAt.set(seen.name, seen.at)
    } else if (seen.k === 'pod-deleted') {
      if (!this.podDeletedAt.has(seen.name)) this.podDeletedAt.set(seen.name, seen.at)
    } else {
      const set = this.podsOfJob.get(seen.job) ?? new Set<string>()
      this.podsOfJob.set(seen.job, set)
      set.add(seen.name)
    }
  }

  /** The pods of `job`, waiting up to `timeoutMs` for the Job controller to make one (none: []). */
  async podsNow(job: string, timeoutMs = 5000): Promise<string[]> {
    const deadline = Date.now() + timeoutMs
    while (!this.podsOfJob.get(job)?.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    return [...(this.podsOfJob.get(job) ?? [])]
  }

  /** When the last of `pods` was seen deleted; undefined while one is not, or for none. */
  podsDeletedAt(pods: string[]): number | undefined {
    const times = pods.map((p) => this.podDeletedAt.get(p))
    return pods.length && times.every((t) => t !== undefined) ? Math.max(...(times as number[])) : undefined
  }

  stop() {
    return this.stopChild()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [kubeconfigPath, namespace] = process.argv.slice(2)
  if (!kubeconfigPath || !namespace) throw new Error('usage: deletion-watch-process.ts <kubeconfig> <namespace>')
  const kc = new KubeConfig()
  kc.loadFromFile(kubeconfigPath)
  const out = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`)
  const watch = await DeletionWatch.start(kc, namespace, (l) => process.stderr.write(`${l}\n`), out)
  out({ k: 'ready' })
  process.once('SIGTERM', async () => {
    await watch.stop()
    process.exit(0)
  })
}
