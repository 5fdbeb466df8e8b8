// The functions as deployed: compiled to JavaScript (as the image runs `node dist/cmd/manager/main.js`), each in a
// process of its own (FUNCTION=<name>, bound to the topology the provision step made), plus the local Kubernetes
// watcher (dev/chaos/watcher.ts). The fleet restarts a process after the harness kills it (as a Deployment would) and
// also after it exits on its own — that is a crash, recorded with its log tail. It records when each process is
// ready (pulling from its consumers). Every process runs in its own group, watched by a reaper, so none outlives
// the harness however it ends.
import { readFileSync } from 'node:fs'
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { JetStreamManager } from '@nats-io/jetstream'
import { loadFunction } from '../../functions/registry.js'
import { consumerName } from '../../pkg/jetstream/names.js'
import { repoRoot } from '../../test/env/binaries.js'
import { runOk, sleep } from '../../test/env/exec.js'
import { httpGet } from '../../test/env/net.js'
import { Reaper, type ServerProcess, startServer } from '../../test/env/supervisor.js'

/**
 * Compiles the functions and dev/chaos/watcher.ts into `dir` (with node_modules linked in, ESM package.json), so a
 * process starts in a fraction of the time a TypeScript loader needs on a busy machine.
 */
export async function buildFunctions(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true })
  await mkdir(dir, { recursive: true })
  // Linked first: the compiler finds @types/node through it too.
  await symlink(join(repoRoot, 'node_modules'), join(dir, 'node_modules'))
  const tsconfig = join(dir, 'tsconfig.json')
  await writeFile(
    tsconfig,
    JSON.stringify({
      extends: join(repoRoot, 'tsconfig.json'),
      compilerOptions: { outDir: join(dir, 'out'), rootDir: repoRoot, sourceMap: false, incremental: false },
      include: ['pkg', 'events', 'functions', 'cmd/manager', 'cmd/gate', 'dev/chaos/watcher.ts'].map((p) =>
        join(repoRoot, p),
      ),
      exclude: [join(repoRoot, 'events/generate.ts')],
    }),
  )
  await runOk(join(repoRoot, 'node_modules/.bin/tsc'), ['-p', tsconfig], { timeoutMs: 300_000 })
  await writeFile(join(dir, 'out/package.json'), '{"type":"module"}\n')
}

export const FUNCTIONS = ['demand', 'cancel', 'admit', 'lifecycle', 'source', 'watcher'] as const
export type FunctionName = (typeof FUNCTIONS)[number]

export interface Start {
  fn: FunctionName
  at: number
  /** When it was pulling from every consumer it has (the watcher: connected); undefined until then. */
  readyAt?: number
}

export interface Crash {
  fn: FunctionName
  pid: number
  at: number
  how: string
  /** It exited before it was ready (e.g. NATS unreachable at start): Kubernetes would restart it, as here. */
  duringStartup: boolean
  logTail: string
}

interface Member {
  fn: FunctionName
  proc?: ServerProcess
  /** Set while the harness means the process to be down (killed, stopped): its exit is no crash. */
  expectedExit: boolean
  paused: boolean
  generation: number
  /** When the current process was started. */
  startedAt: number
}

export interface FleetOptions {
  /** buildFunctions' directory. */
  buildDir: string
  natsUrl: string
  natsMonitorUrl: string
  /** Every server's monitoring URL in a NATS cluster (a process may be connected to any of them). */
  natsMonitorUrls?: string[]
  /** More environment for every process (e.g. NATS_REPLICAS for the provision step). */
  env?: NodeJS.ProcessEnv
  /**
   * The functions' LOG_LEVEL unless CHAOS_FUNCTION_LOG_LEVEL says otherwise. Default debug: a failing run is rare and
   * load-dependent, and its kept logs must say what admission read (under 1 MB a short run).
   */
  logLevel?: string
  jsm: JetStreamManager
  kubeconfigPath: string
  logDir: string
  /** Delay before a killed or crashed process is started again. */
  restartDelayMs: () => number
  log: (line: string) => void
}

export class Fleet {
  readonly crashes: Crash[] = []
  readonly maxRssKb: Record<string, number> = {}
  readonly starts: Start[] = []
  private readonly members = new Map<FunctionName, Member>()
  private readonly reaper = new Reaper()
  private readonly timers = new Set<NodeJS.Timeout>()
  private rssTimer?: NodeJS.Timeout
  private stopped = false

  constructor(private readonly opts: FleetOptions) {
    for (const fn of FUNCTIONS) {
      this.members.set(fn, { fn, expectedExit: false, paused: false, generation: 0, startedAt: 0 })
      this.maxRssKb[fn] = 0
    }
  }

  /** The provision step (FUNCTION=provision), once, before the functions start (as deployed). */
  async provision(): Promise<void> {
    const proc = startServer(this.reaper, 'provision', process.execPath, this.args('provision'), {
      cwd: repoRoot,
      logPath: join(this.opts.logDir, 'provision.log'),
      env: this.env('provision'),
    })
    const how = await proc.exited
    if (how !== 'exit code 0') throw new Error(`provision failed (${how}):\n${proc.logTail()}`)
  }

  /** Starts every process and waits until all are ready. */
  async startAll(timeoutMs = 120_000): Promise<void> {
    for (const fn of FUNCTIONS) this.spawn(fn)
    this.rssTimer = setInterval(() => this.sampleRss(), 1000)
    const deadline = Date.now() + timeoutMs
    const waiting = () => FUNCTIONS.filter((fn) => this.starts.findLast((s) => s.fn === fn)?.readyAt === undefined)
    while (waiting().length > 0) {
      if (Date.now() > deadline) throw new Error(`not ready after ${timeoutMs / 1000} s: ${waiting().join(', ')}`)
      await sleep(250)
    }
  }

  /** When the process started after `after` became ready (undefined: not yet, or never started again). */
  readyAfter(fn: FunctionName, after: number): number | undefined {
    return this.starts.find((s) => s.fn === fn && s.at >= after)?.readyAt
  }

  pid(fn: FunctionName): number | undefined {
    const m = this.members.get(fn)
    return m?.proc && !m.proc.hasExited() ? m.proc.pid : undefined
  }

  /** Up (started, not paused, not killed) since at least `ms`. */
  upSince(fn: FunctionName): number | undefined {
    const m = this.members.get(fn) as Member
    return this.pid(fn) && !m.paused && !m.expectedExit ? m.startedAt : undefined
  }

  /** kill -9, then a new process after the restart delay. Resolves with the kill time, or undefined if not running. */
  kill9(fn: FunctionName): number | undefined {
    const m = this.members.get(fn) as Member
    const pid = this.pid(fn)
    if (!pid || m.paused || m.expectedExit) return undefined
    m.expectedExit = true
    process.kill(-pid, 'SIGKILL')
    return Date.now()
  }

  /** SIGSTOP: the process keeps its connections and consumers but handles nothing (a hung or starved pod). */
  pause(fn: FunctionName): boolean {
    const m = this.members.get(fn) as Member
    const pid = this.pid(fn)
    if (!pid || m.expectedExit) return false
    m.paused = true
    process.kill(-pid, 'SIGSTOP')
    return true
  }

  resume(fn: FunctionName): void {
    const m = this.members.get(fn) as Member
    const pid = this.pid(fn)
    if (pid && m.paused) process.kill(-pid, 'SIGCONT')
    m.paused = false
  }

  /** Stops every process (SIGTERM to drain, SIGKILL after the reaper's grace period). */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.rssTimer) clearInterval(this.rssTimer)
    for (const t of this.timers) clearTimeout(t)
    for (const m of this.members.values()) {
      m.expectedExit = true
      if (m.paused && m.proc) process.kill(-m.proc.pid, 'SIGCONT')
    }
    await this.reaper.reap()
  }

  private args(fn: string): string[] {
    const out = join(this.opts.buildDir, 'out')
    return [fn === 'watcher' ? join(out, 'dev/chaos/watcher.js') : join(out, 'cmd/manager/main.js')]
  }

  /** Pulling from each of its consumers (the watcher: connected to NATS). */
  private async ready(fn: FunctionName): Promise<boolean> {
    if (fn === 'watcher') {
      for (const url of this.opts.natsMonitorUrls ?? [this.opts.natsMonitorUrl]) {
        const connz = await httpGet(`${url}/connz?limit=1024`).catch(() => undefined)
        if (connz?.status !== 200) continue
        const names = (JSON.parse(connz.body).connections ?? []).map((c: { name?: string }) => c.name)
        if (names.includes('model-backfill:')) return true
      }
      return false
    }
    const factory = await loadFunction(fn)
    if (!factory) throw new Error(`${fn} is not a function of functions/registry.ts`)
    const { subscriptions } = factory()
    for (const sub of subscriptions) {
      const info = await this.opts.jsm.consumers.info(sub.stream, consumerName(fn, sub.stream))
      if (!info.num_waiting) return false
    }
    return true
  }

  private watchReady(start: Start, generation: number): void {
    const m = this.members.get(start.fn) as Member
    const poll = async () => {
      for (let i = 0; i < 600 && !this.stopped && m.generation === generation; i++) {
        if (await this.ready(start.fn).catch(() => false)) {
          start.readyAt = Date.now()
          return
        }
        await sleep(250)
      }
    }
    poll().catch(() => {})
  }

  private env(fn: string): NodeJS.ProcessEnv {
    return {
      ...process.env,
      ...this.opts.env,
      NATS_URL: this.opts.natsUrl,
      KUBECONFIG: this.opts.kubeconfigPath,
      FUNCTION: fn,
      NATS_PROVISION: 'false',
      WATCH: 'false',
      PORT: '0',
      LOG_LEVEL: process.env.CHAOS_FUNCTION_LOG_LEVEL ?? this.opts.logLevel ?? 'debug',
    }
  }

  private spawn(fn: FunctionName): void {
    if (this.stopped) return
    const m = this.members.get(fn) as Member
    m.generation++
    m.expectedExit = false
    m.paused = false
    m.startedAt = Date.now()
    const start: Start = { fn, at: m.startedAt }
    this.starts.push(start)
    const proc = startServer(this.reaper, fn, process.execPath, this.args(fn), {
      cwd: repoRoot,
      logPath: join(this.opts.logDir, `${fn}.${m.generation}.log`),
      env: this.env(fn),
    })
    m.proc = proc
    const generation = m.generation
    this.watchReady(start, generation)
    proc.exited.then((how) => {
      if (this.stopped || m.generation !== generation) return
      this.reaper.forgetGroup(proc.pid)
      if (!m.expectedExit) {
        const duringStartup = start.readyAt === undefined
        this.crashes.push({ fn, pid: proc.pid, at: Date.now(), how, duringStartup, logTail: proc.logTail(30) })
        this.opts.log(
          `${duringStartup ? 'exited while starting' : 'CRASH'}: ${fn} (pid ${proc.pid}) exited by itself: ${how}`,
        )
      }
      const timer = setTimeout(() => {
        this.timers.delete(timer)
        this.spawn(fn)
      }, this.opts.restartDelayMs())
      this.timers.add(timer)
    })
  }

  private sampleRss(): void {
    for (const fn of FUNCTIONS) {
      const pid = this.pid(fn)
      if (!pid) continue
      try {
        const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
        if (m) this.maxRssKb[fn] = Math.max(this.maxRssKb[fn] ?? 0, Number(m[1]))
      } catch {
        // exited between the check and the read
      }
    }
  }
}
