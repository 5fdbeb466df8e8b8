// Starting and stopping server processes without ever leaving one behind.
//
// Every server runs in its own process group (spawn detached → setsid), with stdout/stderr going to a log file,
// so a Ctrl-C in the terminal does not reach it half-way and nothing blocks on a pipe to a dead parent.
// A reaper — a few lines of bash in its own session — is told each group id over a pipe from the owning Node
// process. When that pipe reaches EOF (the owner exited, crashed or was SIGKILLed: the kernel closes its end),
// the reaper stops every group (SIGTERM, SIGKILL after a grace period; newest first) and removes the
// environment's directory. Node has no PR_SET_PDEATHSIG; a pipe's EOF is the portable equivalent, needs no polling
// and cannot be fooled by pid reuse. A detached environment (npm run env:up) tells its reaper `release` once
// everything is up, and `down` later hands the recorded group ids to a fresh reaper.
import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, openSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { isAlive } from './exec.js'

export const DEFAULT_STOP_GRACE_SECONDS = 5

const REAPER_SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'reaper.sh')

export class Reaper {
  private readonly child: ChildProcess
  private readonly exited: Promise<void>
  private done = false

  constructor(graceSeconds = DEFAULT_STOP_GRACE_SECONDS) {
    this.child = spawn('bash', [REAPER_SCRIPT, String(graceSeconds)], {
      detached: true,
      stdio: ['pipe', 'ignore', 'ignore'],
    })
    this.exited = new Promise((resolve) => this.child.once('exit', () => resolve()))
    this.child.stdin?.on('error', () => {})
    // Neither the reaper nor our end of its pipe may keep the owner's event loop alive.
    this.child.unref()
    ;(this.child.stdin as unknown as { unref?: () => void } | null)?.unref?.()
  }

  get pid(): number | undefined {
    return this.child.pid
  }

  private send(line: string): void {
    if (this.done) throw new Error('reaper already finished')
    this.child.stdin?.write(`${line}\n`)
  }

  /** Kill this process group when the owner goes away. */
  watchGroup(pgid: number): void {
    this.send(`group ${pgid}`)
  }

  forgetGroup(pgid: number): void {
    this.send(`forget ${pgid}`)
  }

  /** Run this bash script after the processes are gone and before the directories are removed. */
  runScript(path: string): void {
    this.send(`script ${path}`)
  }

  /** Remove this directory (recursively) after the processes are gone. */
  removeDir(dir: string): void {
    this.send(`dir ${dir}`)
  }

  /** Stop watching: the processes outlive the owner (detached environments). */
  async release(): Promise<void> {
    this.send('release')
    this.done = true
    this.child.stdin?.end()
    this.child.ref() // keep the event loop alive until it has exited
    await this.exited
  }

  /** Kill everything watched (SIGTERM, then SIGKILL after the grace period), remove the dirs, and wait. */
  async reap(): Promise<void> {
    if (!this.done) {
      this.done = true
      this.child.stdin?.end()
    }
    this.child.ref()
    await this.exited
  }
}

/** Stops process groups this process does not own (e.g. recorded by `env:up`), via a one-shot reaper. */
export async function reapGroups(
  pgids: number[],
  dirs: string[],
  graceSeconds = DEFAULT_STOP_GRACE_SECONDS,
  scripts: string[] = [],
) {
  const reaper = new Reaper(graceSeconds)
  for (const g of pgids) reaper.watchGroup(g)
  for (const s of scripts) reaper.runScript(s)
  for (const d of dirs) reaper.removeDir(d)
  await reaper.reap()
}

export interface ServerProcess {
  name: string
  pid: number
  logPath: string
  /** Resolves when the process exits (with a description such as "exit code 1"). */
  exited: Promise<string>
  hasExited(): boolean
  /** The last lines of its log, for error messages. */
  logTail(lines?: number): string
}

export function startServer(
  reaper: Reaper,
  name: string,
  command: string,
  args: string[],
  opts: { cwd: string; logPath: string; env?: NodeJS.ProcessEnv },
): ServerProcess {
  const log = openSync(opts.logPath, 'a')
  let child: ChildProcess
  try {
    child = spawn(command, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      detached: true,
      stdio: ['ignore', log, log],
    })
  } finally {
    closeSync(log)
  }
  const pid = child.pid
  if (pid === undefined) throw new Error(`could not start ${name} (${command})`)
  reaper.watchGroup(pid)
  child.unref()
  let exitedWith: string | undefined
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => {
      exitedWith = signal ? `signal ${signal}` : `exit code ${code}`
      resolve(exitedWith)
    })
    child.once('error', (err) => {
      exitedWith = err.message
      resolve(exitedWith)
    })
  })
  return {
    name,
    pid,
    logPath: opts.logPath,
    exited,
    hasExited: () => exitedWith !== undefined || !isAlive(pid),
    logTail: (lines = 25) => {
      try {
        return readFileSync(opts.logPath, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
      } catch {
        return ''
      }
    },
  }
}

/** Races a readiness wait against the process dying, so a crash fails fast with its log. */
export async function whileRunning<T>(proc: ServerProcess, wait: Promise<T>): Promise<T> {
  const died = proc.exited.then((how) => {
    throw new Error(`${proc.name} exited before it was ready (${how}); last log lines:\n${proc.logTail()}`)
  })
  try {
    return await Promise.race([wait, died])
  } catch (err) {
    if (!proc.hasExited()) {
      const e = err as Error
      e.message += `\n--- ${proc.name} log (${proc.logPath}) ---\n${proc.logTail()}`
    }
    throw err
  } finally {
    died.catch(() => {})
  }
}
