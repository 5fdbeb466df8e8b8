// The functions as deployed: each in a process of its own (runtime/main.ts with FUNCTION=<name>, bound to the
// topology the provision step made), plus the local Kubernetes watcher (chaos/watcher.ts). The fleet restarts a
// process after the harness kills it (as a Deployment would) and also after it exits on its own — that is a crash,
// recorded with its log tail. Every process runs in its own group, watched by the environment's reaper, so none
// outlives the harness however it ends.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { repoRoot } from '../test/env/binaries.js'
import { Reaper, type ServerProcess, startServer } from '../test/env/supervisor.js'

export const FUNCTIONS = ['demand', 'cancel', 'admit', 'lifecycle', 'source', 'watcher'] as const
export type FunctionName = (typeof FUNCTIONS)[number]

export interface Crash {
  fn: FunctionName
  pid: number
  at: number
  how: string
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
  natsUrl: string
  kubeconfigPath: string
  logDir: string
  /** Delay before a killed or crashed process is started again. */
  restartDelayMs: () => number
  log: (line: string) => void
}

export class Fleet {
  readonly crashes: Crash[] = []
  readonly maxRssKb: Record<string, number> = {}
  readonly starts: Record<string, number> = {}
  private readonly members = new Map<FunctionName, Member>()
  private readonly reaper = new Reaper()
  private readonly timers = new Set<NodeJS.Timeout>()
  private rssTimer?: NodeJS.Timeout
  private stopped = false

  constructor(private readonly opts: FleetOptions) {
    for (const fn of FUNCTIONS) {
      this.members.set(fn, { fn, expectedExit: false, paused: false, generation: 0, startedAt: 0 })
      this.maxRssKb[fn] = 0
      this.starts[fn] = 0
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

  startAll(): void {
    for (const fn of FUNCTIONS) this.spawn(fn)
    this.rssTimer = setInterval(() => this.sampleRss(), 1000)
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
    return fn === 'watcher'
      ? ['--import', 'tsx', join(repoRoot, 'chaos/watcher.ts')]
      : ['--import', 'tsx', join(repoRoot, 'runtime/main.ts')]
  }

  private env(fn: string): NodeJS.ProcessEnv {
    return {
      ...process.env,
      NATS_URL: this.opts.natsUrl,
      KUBECONFIG: this.opts.kubeconfigPath,
      FUNCTION: fn,
      NATS_PROVISION: 'false',
      WATCH: 'false',
      PORT: '0',
      LOG_LEVEL: process.env.CHAOS_FUNCTION_LOG_LEVEL ?? 'warn',
    }
  }

  private spawn(fn: FunctionName): void {
    if (this.stopped) return
    const m = this.members.get(fn) as Member
    m.generation++
    m.expectedExit = false
    m.paused = false
    m.startedAt = Date.now()
    this.starts[fn] = (this.starts[fn] ?? 0) + 1
    const proc = startServer(this.reaper, fn, process.execPath, this.args(fn), {
      cwd: repoRoot,
      logPath: join(this.opts.logDir, `${fn}.log`),
      env: this.env(fn),
    })
    m.proc = proc
    const generation = m.generation
    proc.exited.then((how) => {
      if (this.stopped || m.generation !== generation) return
      this.reaper.forgetGroup(proc.pid)
      if (!m.expectedExit) {
        const crash = { fn, pid: proc.pid, at: Date.now(), how, logTail: proc.logTail(30) }
        this.crashes.push(crash)
        this.opts.log(`CRASH: ${fn} (pid ${proc.pid}) exited by itself: ${how}`)
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
